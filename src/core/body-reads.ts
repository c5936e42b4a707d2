import { abortReason, signalAborted, signalReason } from "./abort-reason.js";
import type { RunError } from "./errors.js";
import { type BodyReadBounds, needsBodies, readBodies } from "./fetch-wire.js";

/** How a bounded read of bodies ended: all read, or why not. */
export type BodiesRead = "read" | "timed-out" | "aborted" | "too-large" | { failed: unknown };

/**
 * Buffer the bodies of the Requests and Responses among `values`, within bounds: `ms` of wall
 * time (none when undefined), `maxBytes` a body (refused as it arrives, not held whole) and the
 * caller's `signal`. When one body fails, the others still being read are cancelled with it.
 * Every host-side read of a body that crosses goes through here: a body is a stream someone
 * else controls (a client's upload, an upstream's response), and may stall or never end.
 */
export async function readBodiesWithin(
  values: unknown[],
  { ms, maxBytes, signal, chunk }: { ms?: number; maxBytes: number; signal?: AbortSignal; chunk?: BodyReadBounds["chunk"] },
): Promise<BodiesRead> {
  const stop = new AbortController();
  let timedOut = false;
  const timer =
    ms === undefined
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          stop.abort();
        }, ms);
  const onAbort = () => stop.abort();
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signalAborted(signal)) stop.abort();
  const bounds: BodyReadBounds = { signal: stop.signal, maxBytes, chunk };
  try {
    await readBodies(values, bounds);
    return "read";
  } catch (error) {
    if (signalAborted(signal)) return "aborted";
    if (timedOut) return "timed-out";
    if (bounds.exceeded) return "too-large";
    return { failed: error };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
    stop.abort();
  }
}

/**
 * Read the bodies among a call's arguments (or a run's input) before the call starts, under the
 * call's own limits: one that stalls ends at the wall time limit, the caller's signal cancels
 * it, and one longer than memoryMb (it could never fit in the instance) is refused. Returns the
 * error the call fails with, or undefined once all are read (at once when there are none).
 */
export async function readArgumentBodies(
  args: unknown[],
  limits: { wallTimeMs: number; memoryMb: number },
  signal: AbortSignal | undefined,
  where = "among the call's arguments",
): Promise<RunError | undefined> {
  if (!needsBodies(args)) return undefined;
  const what = `a Request or Response body ${where}`;
  const read = await readBodiesWithin(args, { ms: limits.wallTimeMs, maxBytes: limits.memoryMb * 1024 * 1024, signal });
  switch (read) {
    case "read":
      return undefined;
    case "aborted":
      return { code: "ERR_ABORTED", name: "AbortError", message: signal ? signalReason(signal) : abortReason(undefined) };
    case "timed-out":
      return {
        code: "ERR_WALL_TIMEOUT",
        name: "CordonError",
        message: `the run exceeded its wall time limit of ${limits.wallTimeMs} ms reading ${what}`,
      };
    case "too-large":
      return {
        code: "ERR_MEMORY_LIMIT",
        name: "CordonError",
        message: `${what} is longer than the run's memory limit of ${limits.memoryMb} MB`,
      };
    default:
      return { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: `${what} could not be read: ${describe(read.failed)}` };
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
