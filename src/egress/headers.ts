import { EgressError } from "./errors.js";

// The connection belongs to the broker: these would let the guest shape the wire (another Host
// than the checked one, request smuggling through framing headers, a held-open connection).
const CONNECTION_HEADERS = new Set([
  "host",
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "content-length",
  "upgrade",
  "te",
  "trailer",
  "expect",
]);

// Fetch drops these when a redirect leaves the origin (Authorization by spec; cookies and proxy
// credentials because they are credentials of the first origin too).
const CREDENTIAL_HEADERS = ["authorization", "cookie", "proxy-authorization"];
// Fetch drops these when a redirect turns the request into a GET without body.
const BODY_HEADERS = ["content-type", "content-encoding", "content-language", "content-location"];

const FORBIDDEN_CHARS = /[\r\n\0]/;

function check(name: unknown, value: unknown): void {
  if (FORBIDDEN_CHARS.test(String(name)) || FORBIDDEN_CHARS.test(String(value))) {
    throw new EgressError("headers", `header ${JSON.stringify(String(name))} contains CR, LF or NUL`);
  }
}

/**
 * Refuse CR, LF or NUL anywhere in the caller's raw header names and values. `Headers` would
 * reject them inside a value but silently trim them at its ends; a refusal is clearer than a
 * rewrite. A `Headers` object was already validated when it was built.
 */
export function checkRawHeaders(headers: unknown): void {
  if (headers === undefined || headers === null || headers instanceof Headers) return;
  if (typeof headers !== "object") return;
  if (Symbol.iterator in headers) {
    for (const pair of headers as Iterable<unknown>) {
      if (Array.isArray(pair)) check(pair[0], pair[1]);
    }
    return;
  }
  for (const [name, value] of Object.entries(headers)) check(name, value);
}

/**
 * Control characters other than HTAB: `Headers` lets them into a value (fetch forbids only NUL,
 * CR and LF there), HTTP's field-value grammar does not, and undici refused them only as it sent
 * (`fetch failed (UND_ERR_INVALID_ARG)`, a network failure rather than a refusal).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point.
const CONTROL_CHAR = /[\x00-\x08\x0a-\x1f\x7f]/;

/** The headers to send: the request's own, minus the connection-level ones; a control character in a value is refused. */
export function outgoingHeaders(headers: Headers): [string, string][] {
  const result: [string, string][] = [];
  for (const [name, value] of headers) {
    const bad = CONTROL_CHAR.exec(value);
    if (bad !== null) {
      const code = bad[0].charCodeAt(0).toString(16).padStart(2, "0");
      throw new EgressError("headers", `header ${JSON.stringify(name)} has a control character (0x${code}) in its value`);
    }
    if (!CONNECTION_HEADERS.has(name)) result.push([name, value]);
  }
  return result;
}

export function withoutHeaders(headers: [string, string][], names: readonly string[]): [string, string][] {
  return headers.filter(([name]) => !names.includes(name));
}

export function dropCredentials(headers: [string, string][]): [string, string][] {
  return withoutHeaders(headers, CREDENTIAL_HEADERS);
}

export function dropBodyHeaders(headers: [string, string][]): [string, string][] {
  return withoutHeaders(headers, BODY_HEADERS);
}
