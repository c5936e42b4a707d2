/** Helpers for tests that watch real processes: is one alive, and wait until something holds. */

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Wait until `check()` holds, polling every 20 ms; throws after `ms`. */
export async function until(check: () => boolean, ms = 5000): Promise<void> {
  const end = performance.now() + ms;
  while (!check()) {
    if (performance.now() > end) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 20));
  }
}
