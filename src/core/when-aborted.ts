import { onAbort as watchAbort } from "./abort-listeners.js";
import { signalAborted } from "./abort-reason.js";

/**
 * Call `onAbort` once, when the first of `signals` aborts (at once if one already has). Returns
 * what takes the listeners off again, for when the work they watch is done. Listeners on the
 * signals themselves, not AbortSignal.any: Node 20 can collect a composite signal whose sources
 * outlive it, and its abort then never comes (found under load: aborted fetches stayed open).
 * `aborted` is read by the native getter: a caller's signal may shadow it with one that throws.
 */
export function whenAborted(signals: readonly (AbortSignal | undefined)[], onAbort: () => void): () => void {
  let called = false;
  const fire = () => {
    if (called) return;
    called = true;
    onAbort();
  };
  const watched = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  const stops: (() => void)[] = [];
  for (const signal of watched) {
    if (signalAborted(signal)) fire();
    else stops.push(watchAbort(signal, fire));
  }
  return () => {
    for (const stop of stops) stop();
  };
}
