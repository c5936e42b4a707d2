const FALLBACK = "aborted by the caller";

/**
 * A caller's abort reason as text. The reason is the caller's own object, read on the host's
 * thread from an abort listener: a getter that throws (or a Proxy) must not become an uncaught
 * exception, so only a string, or an Error's string message or name, is taken.
 */
export function abortReason(reason: unknown): string {
  try {
    if (typeof reason === "string") return reason || FALLBACK;
    if (reason instanceof Error) {
      const message: unknown = reason.message;
      if (typeof message === "string" && message) return message;
      const name: unknown = reason.name;
      if (typeof name === "string" && name) return name;
    }
  } catch {}
  return FALLBACK;
}
