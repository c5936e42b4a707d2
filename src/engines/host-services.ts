/**
 * Services every engine's guest runtime borrows from the host, synchronously and as text:
 * WHATWG URL parsing (so guests get Node's exact parser) and random bytes.
 *
 * SELF-CONTAINED: the QuickJS worker thread evaluates `createHostServices.toString()`, so the
 * v8 engine and the worker share this one implementation. Only globals are used (URL, crypto).
 */
export interface HostServices {
  /** The URL's components as JSON text, or "" when `input` (against `base`) is not a URL. */
  parseUrl(input: unknown, base?: unknown): string;
  /** Set one component; the new components as JSON text, or "" when refused. */
  setUrlPart(href: unknown, part: unknown, value: unknown): string;
  /** Up to 65 536 cryptographically random bytes. */
  randomBytes(n: unknown): Uint8Array;
}

export function createHostServices(): HostServices {
  const URL_PARTS = [
    "href",
    "origin",
    "protocol",
    "username",
    "password",
    "host",
    "hostname",
    "port",
    "pathname",
    "search",
    "hash",
  ];
  const SETTABLE = ["href", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
  const MAX_URL_LENGTH = 1 << 20;
  const MAX_RANDOM_BYTES = 65536;

  function components(url: URL): string {
    const out: Record<string, string> = {};
    for (const part of URL_PARTS) out[part] = (url as unknown as Record<string, string>)[part];
    return JSON.stringify(out);
  }

  function parseUrl(input: unknown, base?: unknown): string {
    if (typeof input !== "string" || input.length > MAX_URL_LENGTH) return "";
    if (base !== undefined && (typeof base !== "string" || base.length > MAX_URL_LENGTH)) return "";
    try {
      return components(base === undefined ? new URL(input) : new URL(input, base));
    } catch {
      return "";
    }
  }

  return {
    parseUrl,
    setUrlPart(href, part, value) {
      if (typeof href !== "string" || typeof part !== "string" || typeof value !== "string") return "";
      if (!SETTABLE.includes(part) || value.length > MAX_URL_LENGTH) return "";
      if (part === "href") return parseUrl(value);
      try {
        const url = new URL(href);
        (url as unknown as Record<string, string>)[part] = value;
        return components(url);
      } catch {
        return "";
      }
    },
    randomBytes(n) {
      const size = typeof n === "number" && n >= 0 ? Math.min(Math.floor(n), MAX_RANDOM_BYTES) : 0;
      return globalThis.crypto.getRandomValues(new Uint8Array(size));
    },
  };
}

/** The host's instance, for engines that run in this realm (v8). */
export const hostServices: HostServices = createHostServices();
