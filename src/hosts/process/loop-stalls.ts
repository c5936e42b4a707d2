/**
 * The process host's one timer, and how long this process's event loop has been held.
 *
 * Held time: each tick adds what it arrived late by. The host judges a worker by what it hears
 * from it (the flood guard by its reading rate, the backstop by its silence), and while the loop
 * is held (a host function's large answers being encoded, say) the host feeds no pipe and hears
 * nothing: a healthy worker read "0 KB/s" or "stopped answering" and was ended, failing its other
 * runs with the one that held the loop (40 answers of 8 MB at once: a 3.8 s hold). Both now count
 * only time the loop ran.
 *
 * One timer: every pool's RSS watchdog looks on the same tick, BUSY_TICK_MS apart while any
 * watcher has work in flight (the design asks for at most 50 ms), IDLE_TICK_MS while none has.
 * Each wake-up of an idle host cost ~190 µs of CPU on the development VM: a watchdog every 25 ms
 * and a heartbeat every 50 ms of their own took 16.7 ms of CPU a second from a sandbox doing
 * nothing.
 */
export const BUSY_TICK_MS = 25;
export const IDLE_TICK_MS = 50;

/** What runs on the tick: `tick` on each, and whether it has work in flight (the faster rate). */
export interface LoopWatcher {
  tick?: () => void;
  busy?: () => boolean;
}

const watchers = new Set<LoopWatcher>();
let heldMs = 0;
/** When the pending tick is due. */
let due = 0;
let timer: NodeJS.Timeout | undefined;

function schedule(): void {
  let busy = false;
  for (const watcher of watchers) {
    if (watcher.busy?.()) {
      busy = true;
      break;
    }
  }
  const ms = busy ? BUSY_TICK_MS : IDLE_TICK_MS;
  due = performance.now() + ms;
  timer = setTimeout(tick, ms);
  timer.unref();
}

function tick(): void {
  heldMs += Math.max(0, performance.now() - due);
  timer = undefined;
  try {
    for (const watcher of watchers) watcher.tick?.();
  } finally {
    // A watcher added during the ticks has scheduled the next one already.
    if (watchers.size > 0 && timer === undefined) schedule();
  }
}

/** Run `watcher` on the tick (and count held time) until the returned function is called (once). */
export function watchLoop(watcher: LoopWatcher = {}): () => void {
  watchers.add(watcher);
  if (timer === undefined) schedule();
  let watching = true;
  return () => {
    if (!watching) return;
    watching = false;
    watchers.delete(watcher);
    if (watchers.size === 0 && timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
  };
}

/**
 * Milliseconds the loop has been held while watched, the hold under way included: the
 * difference of two readings is the time it was held between them.
 */
export function loopHeldMs(): number {
  if (timer === undefined) return heldMs;
  return heldMs + Math.max(0, performance.now() - due);
}
