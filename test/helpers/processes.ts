import { readdirSync, readFileSync } from "node:fs";
import { afterEach } from "vitest";
import type { Sandbox } from "../../src/index.js";

/** Helpers for tests that watch real processes: is one alive, and wait until something holds. */

export function alive(pid: number): boolean {
  // 0 or less names a process group, which kill(pid, 0) always finds (stats say pid 0 for a
  // worker still starting): refused, not answered "alive".
  if (!(pid > 0)) throw new Error(`alive(${pid}): not a process id`);
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Neither gone nor a zombie (a zombie waits for a reaper that may never come in a container). */
export function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/** Wait until `check()` holds, polling every 20 ms; throws after `ms`. */
export async function until(check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const end = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > end) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * The pids of a sandbox's started worker processes, from its stats. One still starting reads pid 0
 * until the spawner answers: left in, /proc/0 fails to open, and process.kill(0, …) signals the
 * test runner's whole process group.
 */
export function workerPids(sandbox: Sandbox): number[] {
  return (sandbox.stats().workers ?? []).map((w) => w.pid).filter((pid) => pid > 0);
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

/** A process under this one: its pid, parent, state ("Z": nobody reaped it), name and CPU ticks. */
export interface Descendant {
  pid: number;
  ppid: number;
  state: string;
  comm: string;
  ticks: number;
}

/** Every process under `root` (its children, theirs, …), from Linux /proc. */
export function descendants(root = process.pid): Descendant[] {
  const all: Descendant[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      // pid (comm) state ppid …: comm may hold spaces and parentheses, so split after the last ")".
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      // utime and stime are fields 14 and 15 of stat: 11 and 12 after "pid (comm) ".
      all.push({
        pid: Number(name),
        ppid: Number(fields[1]),
        state: fields[0],
        comm,
        ticks: Number(fields[11]) + Number(fields[12]),
      });
    } catch {
      // The process ended while we looked.
    }
  }
  const under = new Set([root]);
  const found: Descendant[] = [];
  // Parents come before their children in no particular order: repeat until nothing is added.
  for (let added = true; added; ) {
    added = false;
    for (const each of all) {
      if (under.has(each.ppid) && !under.has(each.pid)) {
        under.add(each.pid);
        found.push(each);
        added = true;
      }
    }
  }
  return found;
}

/** esbuild's service processes under this process (started by its esbuild clients). */
export function esbuildServices(): Descendant[] {
  return descendants().filter((each) => each.comm === "esbuild");
}
