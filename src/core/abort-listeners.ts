/**
 * One "abort" listener per signal, whatever the number of runs watching it. A caller may give
 * one signal to many runs (a request's, a shutdown's); each layer that listened on it for each run
 * made Node print "MaxListenersExceededWarning: Possible EventTarget memory leak detected. 11
 * abort listeners added to [AbortSignal]" at the eleventh concurrent run (found by review). Here
 * the runs are kept in a set of our own, which the signal's one listener calls.
 */
const watchers = new WeakMap<AbortSignal, Set<() => void>>();

// EventTarget's own method, taken once: a caller's signal may shadow addEventListener with one
// that throws (or never calls back), which threw from inside a run after it held an instance.
const addEventListener = EventTarget.prototype.addEventListener;

/**
 * Call `onAbort` when `signal` aborts (never if it already has: callers check `aborted` first).
 * Returns what stops watching.
 */
export function onAbort(signal: AbortSignal, onAbort: () => void): () => void {
  let set = watchers.get(signal);
  if (set === undefined) {
    const made = new Set<() => void>();
    set = made;
    watchers.set(signal, made);
    Reflect.apply(addEventListener, signal, [
      "abort",
      () => {
        watchers.delete(signal);
        // A copy: a callback may stop another from watching.
        for (const each of [...made]) if (made.has(each)) each();
        made.clear();
      },
      { once: true },
    ]);
  }
  const watching = set;
  watching.add(onAbort);
  return () => {
    watching.delete(onAbort);
  };
}
