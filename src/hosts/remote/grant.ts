import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Per-run grants: what an executor presents when it calls back to the host for a run's bindings.
 * A grant is `base64url(payload).base64url(HMAC-SHA256(key, payload))`; the payload names the
 * run, the subject (tenant), the binding names the run may call, and an expiry. The executor
 * never holds the key: a stolen grant is worth one run, until it expires.
 */
export interface GrantPayload {
  /** The run (or prefix) this grant is bound to. */
  run: string;
  /** Who the run is for (a tenant or user id); informational for the host's logs. */
  sub: string;
  /** Binding names the run may call. */
  names: string[];
  /** Expiry, in milliseconds since the epoch. */
  exp: number;
}

export class GrantError extends Error {
  constructor(
    message: string,
    readonly reason: "malformed" | "signature" | "expired" | "run" | "name",
  ) {
    super(message);
    this.name = "GrantError";
  }
}

const MIN_KEY_BYTES = 32;

export function checkGrantKey(key: Uint8Array | string): Buffer {
  const bytes = typeof key === "string" ? Buffer.from(key, "utf8") : Buffer.from(key);
  if (bytes.length < MIN_KEY_BYTES)
    throw new TypeError(`cordon: a grant key needs at least ${MIN_KEY_BYTES} bytes, got ${bytes.length}`);
  return bytes;
}

function mac(key: Buffer, payload: string): Buffer {
  return createHmac("sha256", key).update(payload).digest();
}

export function signGrant(key: Uint8Array | string, payload: GrantPayload): string {
  const body = Buffer.from(JSON.stringify(payload), "utf8").toString("base64url");
  return `${body}.${mac(checkGrantKey(key), body).toString("base64url")}`;
}

/**
 * Verify a grant for `run` at `now`: signature (constant time), expiry, run id, and — when
 * `name` is given — that the name was granted. Throws a GrantError saying which check failed.
 */
export function verifyGrant(
  key: Uint8Array | string,
  token: string,
  /** `run` and `name` unset: only the signature and the expiry are checked (before a body is read). */
  expect: { run?: string; name?: string; now?: number },
): GrantPayload {
  const parts = typeof token === "string" ? token.split(".") : [];
  if (parts.length !== 2 || !parts[0] || !parts[1]) throw new GrantError("the grant is not a grant", "malformed");
  const [body, signature] = parts;
  const expected = mac(checkGrantKey(key), body);
  const given = Buffer.from(signature, "base64url");
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    throw new GrantError("the grant's signature does not verify", "signature");
  let payload: GrantPayload;
  try {
    payload = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as GrantPayload;
  } catch {
    throw new GrantError("the grant's payload is not JSON", "malformed");
  }
  if (typeof payload?.run !== "string" || !Array.isArray(payload.names) || typeof payload.exp !== "number") {
    throw new GrantError("the grant's payload is incomplete", "malformed");
  }
  return checkGrant(payload, expect);
}

/**
 * A grant's claims, read WITHOUT verifying it: for an executor, which holds no key, to tell which
 * of two grants it was given expires later and which run each names. Undefined when unreadable.
 */
export function peekGrant(token: string): Pick<GrantPayload, "run" | "exp"> | undefined {
  const [body] = token.split(".");
  try {
    const payload = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as Partial<GrantPayload>;
    if (typeof payload?.run !== "string" || typeof payload.exp !== "number") return undefined;
    return { run: payload.run, exp: payload.exp };
  } catch {
    return undefined;
  }
}

/**
 * The checks of a verified grant's payload: expiry, run id and, when `name` is given, that the
 * name was granted. For a second look at a grant verified earlier (once the body naming the run
 * and the binding is read), without computing its signature again.
 */
export function checkGrant(payload: GrantPayload, expect: { run?: string; name?: string; now?: number }): GrantPayload {
  if ((expect.now ?? Date.now()) >= payload.exp) throw new GrantError("the grant has expired", "expired");
  if (expect.run !== undefined && payload.run !== expect.run) throw new GrantError("the grant is for another run", "run");
  if (expect.name !== undefined && !payload.names.includes(expect.name)) {
    throw new GrantError(`the grant does not include ${JSON.stringify(expect.name)}`, "name");
  }
  return payload;
}
