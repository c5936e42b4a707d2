/** The host thread's time a guest causes through synchronous crossings, charged to its CPU. */

/**
 * What one crossing between the isolate and the host's thread costs that thread beyond the
 * host's own function: isolated-vm's hand-off (waking the loop, entering its context, copying
 * the arguments back and forth). Measured with raw isolated-vm here: 11-15 µs of the host
 * thread's CPU per synchronous callback that does nothing (its body: 0.1 µs), against ~2 µs of
 * the isolate's CPU time, which is all the isolate's clock sees. Charged a little under that.
 */
export const CROSSING_NS = 10_000n;

/**
 * A host callback the guest calls synchronously, its host time charged to the guest's CPU: it
 * runs on the host's thread while the isolate's waits, so the isolate's CPU clock never saw it.
 * Uncharged, a guest calling URL setters back to back (~5 ms of host CPU each, ~26 ms at worst)
 * kept the host's thread busy for its whole wall time under any CPU limit, and so did one arming
 * and clearing timers (~13 µs of host CPU per call, ~2 µs of the isolate's: 1.5 s of the host's
 * CPU within a 300 ms CPU limit, ended by the wall time).
 */
export function charged<A extends unknown[], R>(
  holder: { instance?: { hostNs: bigint } },
  service: (...args: A) => R,
): (...args: A) => R {
  return (...args: A) => {
    const start = process.hrtime.bigint();
    try {
      return service(...args);
    } finally {
      if (holder.instance) holder.instance.hostNs += hostTimeSince(start);
    }
  };
}

/** The host thread's time since `start` (process.hrtime.bigint()) plus one crossing's hand-off. */
export function hostTimeSince(start: bigint): bigint {
  return process.hrtime.bigint() - start + CROSSING_NS;
}
