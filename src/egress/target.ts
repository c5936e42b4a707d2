import { EgressError } from "./errors.js";
import { effectivePort, ruleHostOf } from "./rules.js";

const SCHEMES = new Set(["http", "https"]);

/**
 * The scheme as the URL parser will read it, found before the URL is parsed: the parser's own
 * preprocessing (strip leading and trailing C0 controls and spaces, drop tabs and newlines), then
 * the scheme production. null: the text has no scheme (a relative reference).
 */
export function schemeOf(raw: string): string | null {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: this is the URL parser's own preprocessing
  const text = raw.replace(/^[\u0000-\u0020]+|[\u0000-\u0020]+$/g, "").replace(/[\t\n\r]/g, "");
  const match = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(text);
  return match ? match[1].toLowerCase() : null;
}

/** A short form of a URL for messages: the origin, never credentials, query or fragment. */
function originOf(url: URL): string {
  return `${url.protocol}//${url.host}`;
}

/**
 * Scheme first, then the WHATWG parse, then userinfo. `base` is set for a redirect's Location,
 * which may be relative (it then keeps the base's scheme).
 */
export function parseTarget(raw: string, base?: URL): URL {
  const scheme = schemeOf(raw);
  if (scheme === null && base === undefined) {
    throw new EgressError("scheme", `${JSON.stringify(raw.slice(0, 100))} is not an absolute http or https URL`);
  }
  if (scheme !== null && !SCHEMES.has(scheme)) {
    throw new EgressError("scheme", `scheme "${scheme}:" is not allowed (only http and https)`);
  }
  let url: URL;
  try {
    url = new URL(raw, base);
  } catch {
    throw new EgressError("url", `${JSON.stringify(raw.slice(0, 100))} is not a valid URL`);
  }
  // What the parser decided is what counts, whatever the text looked like.
  if (!SCHEMES.has(url.protocol.slice(0, -1))) {
    throw new EgressError("scheme", `scheme "${url.protocol}" is not allowed (only http and https)`);
  }
  if (url.username !== "" || url.password !== "") {
    throw new EgressError("url", `credentials in the URL are not allowed (${originOf(url)})`);
  }
  return url;
}

/** `scheme://host:port` with the port always written: the key of an internal origin. */
function originKey(protocol: string, host: string, port: number): string {
  return `${protocol}//${host}:${port}`;
}

/**
 * Parse `internalOrigins`: exact `scheme://host:port` origins (a default port may be left out).
 * Anything more (a path, a query, credentials) is a TypeError: an exemption must not look
 * narrower than it is.
 */
export function parseInternalOrigins(origins: unknown): ReadonlySet<string> {
  if (origins === undefined) return new Set();
  if (!Array.isArray(origins)) throw new TypeError("internalOrigins must be an array of origins");
  return new Set(
    origins.map((origin, i) => {
      const at = `internalOrigins[${i}] (${JSON.stringify(origin)})`;
      if (typeof origin !== "string") throw new TypeError(`${at} must be a string`);
      let url: URL;
      try {
        url = new URL(origin);
      } catch {
        throw new TypeError(`${at} is not a valid origin`);
      }
      if (!SCHEMES.has(url.protocol.slice(0, -1))) throw new TypeError(`${at} must be http or https`);
      if (url.username || url.password || url.search || url.hash || url.pathname !== "/") {
        throw new TypeError(`${at} must be exactly scheme://host:port`);
      }
      return originKey(url.protocol, ruleHostOf(url), effectivePort(url));
    }),
  );
}

/**
 * Is a special address exempt for this request? Only when the operator listed the origin as the
 * URL writes it (`http://db.internal:5432`, `http://127.0.0.1:5432`): same host, scheme and port.
 * Never by the address a name resolved to: a name the run may fetch (its own domain, say) could
 * then point its DNS at the listed address and reach the deployment's internal service.
 */
export function isExempt(internal: ReadonlySet<string>, url: URL): boolean {
  return internal.has(originKey(url.protocol, ruleHostOf(url), effectivePort(url)));
}

export { originOf };
