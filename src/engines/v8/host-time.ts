/** The host thread's time a guest causes through synchronous crossings, charged to its CPU. */

/**
 * What one crossing between the isolate and the host's thread costs the machine beyond the
 * host's own function: isolated-vm's hand-off (waking the host's loop, entering its context,
 * copying the arguments back and forth, and the isolate's thread waiting and waking), which no
 * clock in the host's JavaScript sees. Measured with raw isolated-vm here (2026-12-04, a loop of
 * synchronous callbacks that do nothing, the host's loop otherwise idle): 59-66 µs of the
 * process's CPU per crossing (the host's thread ~33, the isolate's ~26), 104-114 µs in a slower
 * hour of the same VM, of which the isolate's CPU clock sees ~2.4 µs. Charged 10 µs until then,
 * a guest looping such crossings got ~3.4x its CPU limit out of the process until its wall time
 * ended it. With the host's loop busy the hand-off costs less (~40 µs a crossing in all, the
 * loop's own work included), so a guest crossing then is charged somewhat more than it costs: the
 * limit errs towards the host (bench/crossing-charge.js prints both on the machine at hand).
 */
export const CROSSING_NS = 50_000n;

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
