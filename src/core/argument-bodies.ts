import { abortReason } from "./abort-reason.js";
import type { RunError } from "./errors.js";
import { type BodyReadBounds, readBodies } from "./fetch-wire.js";

/**
 * Buffer the bodies of the Requests and Responses among a call's arguments (or a run's input)
 * before the call starts, under the call's own limits. The body is the caller's stream (often a
 * client's upload passed straight on): one that stalls ends at the wall time limit, the caller's
 * signal cancels it, and one longer than memoryMb (it could never fit in the instance) is
 * refused as it arrives instead of held whole. Returns the error the call fails with, or
 * undefined once all are read.
 */
export async function readArgumentBodies(
  args: unknown[],
  limits: { wallTimeMs: number; memoryMb: number },
  signal: AbortSignal | undefined,
  where = "among the call's arguments",
): Promise<RunError | undefined> {
  const what = `a Request or Response body ${where}`;
  const stop = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    stop.abort();
  }, limits.wallTimeMs);
  const onAbort = () => stop.abort();
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) stop.abort();
  const bounds: BodyReadBounds = { signal: stop.signal, maxBytes: limits.memoryMb * 1024 * 1024 };
  try {
    await readBodies(args, bounds);
    return undefined;
  } catch (error) {
    if (signal?.aborted) return { code: "ERR_ABORTED", name: "AbortError", message: abortReason(signal.reason) };
    if (timedOut)
      return {
        code: "ERR_WALL_TIMEOUT",
        name: "CordonError",
        message: `the run exceeded its wall time limit of ${limits.wallTimeMs} ms reading ${what}`,
      };
    if (bounds.exceeded)
      return {
        code: "ERR_MEMORY_LIMIT",
        name: "CordonError",
        message: `${what} is longer than the run's memory limit of ${limits.memoryMb} MB`,
      };
    return { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: `${what} could not be read: ${describe(error)}` };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
    // One body refused or failed: the others still being read are cancelled with it.
    stop.abort();
  }
}

/** The caller's stream error as text, without trusting its getters. */
function describe(error: unknown): string {
  try {
    if (error instanceof Error && typeof error.message === "string") return error.message;
    if (typeof error === "string") return error;
  } catch {}
  return "the stream failed";
}
