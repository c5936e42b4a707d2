/**
 * How long this process's event loop has been held, in all: a heartbeat every HEARTBEAT_MS adds
 * what it arrived late by. The host judges a worker by what it hears from it (the flood guard by
 * its reading rate, the backstop by its silence), and while the loop is held (a host function's
 * large answers being encoded, say) the host feeds no pipe and hears nothing: a healthy worker
 * read "0 KB/s" or "stopped answering" and was ended, failing its other runs with the one that
 * held the loop (40 answers of 8 MB at once: a 3.8 s hold). Both now count only time the loop ran.
 *
 * The heartbeat runs while a worker is alive (watchLoop): the pool's RSS watchdog polls at about
 * the same rate then anyway.
 */
const HEARTBEAT_MS = 50;

let heldMs = 0;
let last = 0;
let watchers = 0;
let timer: NodeJS.Timeout | undefined;

function beat(): void {
  const now = performance.now();
  heldMs += Math.max(0, now - last - HEARTBEAT_MS);
  last = now;
}

/** Keep the heartbeat running until the returned function is called (once). */
export function watchLoop(): () => void {
  if (watchers++ === 0) {
    last = performance.now();
    timer = setInterval(beat, HEARTBEAT_MS);
    timer.unref();
  }
  let watching = true;
  return () => {
    if (!watching) return;
    watching = false;
    if (--watchers === 0) {
      clearInterval(timer);
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
  return heldMs + Math.max(0, performance.now() - last - HEARTBEAT_MS);
}
