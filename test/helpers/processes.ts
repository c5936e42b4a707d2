import { afterEach } from "vitest";
import type { Sandbox } from "../../src/index.js";

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

/** The pids of a sandbox's worker processes, from its stats. */
export function workerPids(sandbox: Sandbox): number[] {
  return (sandbox.stats().workers ?? []).map((w) => w.pid);
}

/** Keep the sandboxes a test opens; each is disposed after the test. */
export function disposedAfterEach(): (sandbox: Sandbox) => Sandbox {
  const opened: Sandbox[] = [];
  afterEach(async () => {
    for (const sandbox of opened.splice(0)) await sandbox.dispose();
  });
  return (sandbox) => {
    opened.push(sandbox);
    return sandbox;
  };
}
