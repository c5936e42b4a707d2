/** The shortest executor secret accepted, in bytes of UTF-8: guessing it must be hopeless. */
export const MIN_SECRET_BYTES = 32;

/**
 * Whether `secret` can travel as `authorization: Bearer <secret>` unchanged: a header value is
 * trimmed and holds visible ASCII only. The executor refuses to start with any other secret, and
 * the remote host refuses to use one (it would be refused, or mangled, on every request).
 */
export function isHeaderSafeSecret(secret: string): boolean {
  return /^[\x21-\x7e]+$/.test(secret);
}
