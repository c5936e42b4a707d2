import type * as IVM from "isolated-vm";

/**
 * This process's isolates not yet disposed. When the process exits (process.exit, or an uncaught
 * error) while a guest spins in one, isolated-vm's teardown waits for that isolate's thread
 * forever (isolated-vm issue #260): the process hung at 100% CPU instead of exiting. Disposing
 * them in an 'exit' listener stops the guests first. Each leaves the set when it is disposed.
 */
const liveIsolates = new Set<IVM.Isolate>();
let exitHookInstalled = false;

export function trackIsolate(isolate: IVM.Isolate): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", disposeLiveIsolates);
  }
  liveIsolates.add(isolate);
}

export function disposeIsolate(isolate: IVM.Isolate): void {
  liveIsolates.delete(isolate);
  try {
    if (!isolate.isDisposed) isolate.dispose();
  } catch {}
}

/** How long the exit waits for disposed isolates' threads to unwind (measured: 10 ms was enough). */
const EXIT_UNWIND_MS = 100;

function disposeLiveIsolates(): void {
  if (liveIsolates.size === 0) return;
  for (const isolate of liveIsolates) disposeIsolate(isolate);
  // A terminated guest's thread still reports back as it unwinds; if Node tears down first, that
  // report lands in freed memory and the process segfaults (2 in 12 exits without this wait).
  // Nothing else runs any more, so this thread blocks for it.
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, EXIT_UNWIND_MS);
}

/** How many isolates this process holds undisposed (tests: none are retained once disposed). */
export function liveIsolateCount(): number {
  return liveIsolates.size;
}
