import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { isHeaderSafeSecret, MIN_SECRET_BYTES } from "../core/secret-shape.js";

export { MIN_SECRET_BYTES };

/** A fresh secret for one run of the service: 32 random bytes, base64url (43 characters). */
export function generateSecret(): string {
  return randomBytes(32).toString("base64url");
}

/**
 * Check a configured secret. Throws a TypeError that states the minimum and never the secret
 * (nor its length: the message may end up in a log).
 */
export function checkSecret(secret: unknown): string {
  if (typeof secret !== "string") throw new TypeError("cordon: the executor secret must be a string");
  if (Buffer.byteLength(secret, "utf8") < MIN_SECRET_BYTES) {
    throw new TypeError(
      `cordon: the executor secret is too short: it must be at least ${MIN_SECRET_BYTES} bytes ` +
        "(generate one with: node -e \"console.log(require('node:crypto').randomBytes(32).toString('base64url'))\")",
    );
  }
  // A header value is trimmed and holds visible ASCII only: a secret with a trailing newline (read
  // from a file) or other characters would start a service that refuses every client.
  if (!isHeaderSafeSecret(secret)) {
    throw new TypeError(
      "cordon: the executor secret must be visible ASCII characters only (no spaces, line breaks or other characters); trim a secret read from a file",
    );
  }
  return secret;
}

export type Admission = "missing" | "wrong" | "admitted";

/**
 * Admission by `authorization: Bearer <secret>`. Both sides are hashed with SHA-256 first, so
 * timingSafeEqual compares 32 bytes to 32 bytes: neither the secret's length nor a common prefix
 * shows in the time a refusal takes.
 */
export function createAdmission(secret: string): (header: string | undefined) => Admission {
  const expected = digest(secret);
  return (header) => {
    if (header === undefined) return "missing";
    const match = /^bearer[ \t]+(.*)$/is.exec(header.trim());
    if (!match) return "missing";
    return timingSafeEqual(digest(match[1]), expected) ? "admitted" : "wrong";
  };
}

function digest(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}
