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
/** The same, per isolate: one disposed with crossings in flight may hold a guest no limit can stop. */
const crossingsOf = new WeakMap<IVM.Isolate, number>();

/**
 * How long a disposed isolate's crossings may take to unwind before its guest counts as one that
 * cannot be stopped. Disposing terminates the isolate's JavaScript, which unwinds at once; some
 * builtins check for it only when they end (`Object.keys` of a 10⁷-element array near the heap
 * limit ran on for 13 s, its thread at 100% and this process growing by hundreds of MB).
 */
export const UNSTOPPABLE_AFTER_MS = 250;
let unstoppableListener: ((message: string) => void) | undefined;

/**
 * Be told when a disposed isolate's guest runs on past UNSTOPPABLE_AFTER_MS: its thread and
 * memory stay taken until it returns, whatever limit ended its run (a process worker is retired).
 */
export function onUnstoppableGuest(listener: ((message: string) => void) | undefined): void {
  unstoppableListener = listener;
}

export function trackIsolate(isolate: IVM.Isolate): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", disposeLiveIsolates);
  }
  liveIsolates.add(isolate);
}

/**
 * `work`, a crossing that runs guest code on `isolate`'s own thread, counted while in flight: an
 * exit meanwhile may find that thread inside a synchronous host callback (see exit-watchdog.ts),
 * and a disposed isolate whose crossing is still in flight holds a guest that may not stop.
 */
export function guestRunning<T>(work: Promise<T>, isolate: IVM.Isolate): Promise<T> {
  guestCrossings++;
  crossingsOf.set(isolate, (crossingsOf.get(isolate) ?? 0) + 1);
  const done = () => {
    guestCrossings--;
    const left = (crossingsOf.get(isolate) ?? 1) - 1;
    crossingsOf.set(isolate, left);
    if (left === 0) unwound(isolate);
  };
  work.then(done, done);
  return work;
}

/** Disposed isolates whose crossings have not returned yet, for at most UNSTOPPABLE_AFTER_MS each. */
const unwinding = new Set<IVM.Isolate>();
let waitingForUnwinding: (() => void)[] = [];

function unwound(isolate: IVM.Isolate): void {
  if (!unwinding.delete(isolate) || unwinding.size > 0) return;
  const waiting = waitingForUnwinding;
  waitingForUnwinding = [];
  for (const resolve of waiting) resolve();
}

/**
 * Resolves once every disposed isolate's guest has stopped, or has been reported to the
 * onUnstoppableGuest listener (at most UNSTOPPABLE_AFTER_MS): a process worker answers a run that
 * a limit ended after this, so the host hears that the worker is unsound before it can send the
 * next run there.
 */
export function disposedGuestsStopped(): Promise<void> {
  if (unwinding.size === 0) return Promise.resolve();
  return new Promise((resolve) => waitingForUnwinding.push(resolve));
}

export function disposeIsolate(isolate: IVM.Isolate): void {
  liveIsolates.delete(isolate);
  try {
    if (!isolate.isDisposed) isolate.dispose();
  } catch {}
  if ((crossingsOf.get(isolate) ?? 0) === 0 || unwinding.has(isolate)) return;
  unwinding.add(isolate);
  const timer = setTimeout(() => {
    if (!unwinding.has(isolate)) return;
    unstoppableListener?.(
      `a disposed isolate's guest was still running ${UNSTOPPABLE_AFTER_MS} ms later: a builtin that cannot be interrupted`,
    );
    unwound(isolate);
  }, UNSTOPPABLE_AFTER_MS);
  timer.unref();
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
