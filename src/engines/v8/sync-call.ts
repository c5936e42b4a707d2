import type * as IVM from "isolated-vm";
import { CordonError } from "../../core/errors.js";

/**
 * A crossing run on this thread with isolated-vm's `applySync`, for process workers only: there
 * the blocked loop is the worker's, not the caller's, and a warm call skips two thread hand-offs
 * (the isolate's thread waking, then this one). The guest is stopped after `ms` of wall time by
 * isolated-vm's own timer (the isolate is left usable; the caller disposes it anyway, as after
 * any fired limit). While the guest runs here nothing else on this thread does, so wall time is
 * the only clock that can stop it: under CPU contention a guest can be stopped before it has used
 * `ms` of CPU, never after. Throws a CordonError for the time limit; anything else as thrown.
 */
export function syncCall(
  ref: IVM.Reference<(...args: unknown[]) => unknown>,
  args: Parameters<IVM.Reference["applySync"]>[1] & unknown[],
  ms: number,
): string {
  const started = performance.now();
  try {
    return ref.applySync(undefined, args, { timeout: ms }) as string;
  } catch (error) {
    // The runtime's `call` turns what a guest throws into an outcome, so only isolated-vm's
    // timer raises this; the elapsed time rules out a forged message all the same.
    const timedOut = (error as Error)?.message === "Script execution timed out." && performance.now() - started >= ms * 0.9;
    if (!timedOut) throw error;
    const message = `the run exceeded its CPU time limit of ${ms} ms (a quick call runs on its worker's thread, where the limit is counted in wall time)`;
    throw new CordonError("ERR_CPU_TIMEOUT", message);
  }
}
