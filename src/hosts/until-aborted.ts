import { onAbort } from "../core/abort-listeners.js";
import { signalAborted } from "../core/abort-reason.js";

/**
 * `promise`, or undefined once `signal` aborts: a call waiting for its prefix's re-prepare is
 * answered at its abort, not when the prepare (others may still wait for) ends (seen: 2.3 s late
 * on the process host, 3 s on the remote host).
 */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T | undefined> {
  if (!signal) return promise;
  if (signalAborted(signal)) return Promise.resolve(undefined);
  let stop = () => {};
  const aborted = new Promise<undefined>((resolve) => {
    stop = onAbort(signal, () => resolve(undefined));
  });
  return Promise.race([promise, aborted]).finally(stop);
}
