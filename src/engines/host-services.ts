import { randomFillSync } from "node:crypto";

/**
 * Services every engine's guest runtime borrows from the host, synchronously and as text:
 * WHATWG URL parsing (so guests get Node's exact parser) and random bytes.
 */
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
] as const;
const SETTABLE = new Set(["href", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"]);
const MAX_URL_LENGTH = 1 << 20;
const MAX_RANDOM_BYTES = 65536;

function components(url: URL): string {
  const out: Record<string, string> = {};
  for (const part of URL_PARTS) out[part] = url[part];
  return JSON.stringify(out);
}

export function parseUrl(input: unknown, base?: unknown): string {
  if (typeof input !== "string" || input.length > MAX_URL_LENGTH) return "";
  if (base !== undefined && (typeof base !== "string" || base.length > MAX_URL_LENGTH)) return "";
  try {
    return components(base === undefined ? new URL(input) : new URL(input, base));
  } catch {
    return "";
  }
}

export function setUrlPart(href: unknown, part: unknown, value: unknown): string {
  if (typeof href !== "string" || typeof part !== "string" || typeof value !== "string") return "";
  if (!SETTABLE.has(part) || value.length > MAX_URL_LENGTH) return "";
  if (part === "href") return parseUrl(value);
  try {
    const url = new URL(href);
    (url as unknown as Record<string, string>)[part] = value;
    return components(url);
  } catch {
    return "";
  }
}

export function randomBytes(n: unknown): Uint8Array {
  const size = typeof n === "number" && n >= 0 ? Math.min(Math.floor(n), MAX_RANDOM_BYTES) : 0;
  return randomFillSync(new Uint8Array(size));
}
