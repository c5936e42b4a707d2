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

// AbortSignal's own getters, taken once: a caller's signal may shadow `aborted` or `reason` with
// its own property (or an object may only inherit from AbortSignal.prototype), and what that
// returns or throws must not decide an abort nor throw on the host's thread.
const ABORTED = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "aborted")?.get as (this: AbortSignal) => boolean;
const REASON = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "reason")?.get as (this: AbortSignal) => unknown;

/** Whether `value` is a working AbortSignal: the native getter throws for anything else. */
export function isAbortSignal(value: unknown): value is AbortSignal {
  try {
    Reflect.apply(ABORTED, value, []);
    return true;
  } catch {
    return false;
  }
}

/** Whether `signal` (checked by isAbortSignal) has aborted, by the native getter. */
export function signalAborted(signal: AbortSignal | undefined): boolean {
  if (signal === undefined) return false;
  try {
    return Reflect.apply(ABORTED, signal, []) === true;
  } catch {
    return false;
  }
}

/** The abort reason of `signal` itself, by the native getter (undefined if that throws). */
export function signalReasonValue(signal: AbortSignal): unknown {
  try {
    return Reflect.apply(REASON, signal, []);
  } catch {
    return undefined;
  }
}

/** The abort reason of `signal` as text (abortReason), read by the native getter: it never throws. */
export function signalReason(signal: AbortSignal): string {
  try {
    return abortReason(Reflect.apply(REASON, signal, []));
  } catch {
    return FALLBACK;
  }
}
