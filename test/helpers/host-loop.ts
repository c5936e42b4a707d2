/** Hold this thread's event loop for `ms`: a busy wait, so no timer or I/O callback runs meanwhile. */
export function holdLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {}
}

/**
 * Watch this thread's event loop with a timer every `everyMs`. `stop()` ends the watch and says
 * how many times the timer fired and the longest gap between two firings: a loop held for a
 * while shows as a gap that long, and as few firings.
 */
export function watchLoopGaps(everyMs: number): { stop(): { longest: number; ticks: number } } {
  let last = performance.now();
  let longest = 0;
  let ticks = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    ticks++;
    longest = Math.max(longest, now - last);
    last = now;
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      return { longest, ticks };
    },
  };
}
