import type * as IVM from "isolated-vm";
import { armExitWatchdog } from "./exit-watchdog.js";

/**
 * This process's isolates not yet disposed. When the process exits (process.exit, or an uncaught
 * error) while a guest spins in one, isolated-vm's teardown waits for that isolate's thread
 * forever (isolated-vm issue #260): the process hung at 100% CPU instead of exiting. Disposing
 * them in an 'exit' listener stops the guests first. Each leaves the set when it is disposed.
 */
const liveIsolates = new Set<IVM.Isolate>();
let exitHookInstalled = false;

/** How many crossings that run guest code are in flight, in every isolate (see `guestRunning`). */
let guestCrossings = 0;

export function trackIsolate(isolate: IVM.Isolate): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", disposeLiveIsolates);
  }
  liveIsolates.add(isolate);
}

/**
 * `work`, a crossing that runs guest code on the isolate's own thread, counted while in flight: an
 * exit meanwhile may find that thread inside a synchronous host callback (see exit-watchdog.ts).
 */
export function guestRunning<T>(work: Promise<T>): Promise<T> {
  guestCrossings++;
  const done = () => {
    guestCrossings--;
  };
  work.then(done, done);
  return work;
}

export function disposeIsolate(isolate: IVM.Isolate): void {
  liveIsolates.delete(isolate);
  try {
    if (!isolate.isDisposed) isolate.dispose();
  } catch {}
}

/** How long the exit waits for disposed isolates' threads to unwind (measured: 10 ms was enough). */
const EXIT_UNWIND_MS = 100;

function disposeLiveIsolates(code: number): void {
  if (liveIsolates.size === 0) return;
  const guestsRunning = guestCrossings > 0;
  for (const isolate of liveIsolates) disposeIsolate(isolate);
  // A terminated guest's thread still reports back as it unwinds; if Node tears down first, that
  // report lands in freed memory and the process segfaults (2 in 12 exits without this wait).
  // Nothing else runs any more, so this thread blocks for it.
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, EXIT_UNWIND_MS);
  // A guest's thread waiting in a synchronous host callback is not woken by any of this.
  if (guestsRunning) armExitWatchdog(code);
}

/** How many isolates this process holds undisposed (tests: none are retained once disposed). */
export function liveIsolateCount(): number {
  return liveIsolates.size;
}
