import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const watchdog = fileURLToPath(new URL("../../dist/engines/v8/exit-watchdog.js", import.meta.url));

/** The watchdogs still alive for process `pid` (their command line names it). */
function watchdogsOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (argv.some((arg) => arg.includes("process.kill(pid")) && argv.includes(String(pid))) found.push(Number(entry));
    } catch {}
  }
  return found;
}

function runArmed(ms: number, then: string) {
  const script = `const { armExitWatchdog } = await import(${JSON.stringify(watchdog)});
    armExitWatchdog(7, ${ms}); console.log(process.pid); ${then}`;
  const began = performance.now();
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 20_000 });
  return { child, elapsed: performance.now() - began, pid: Number(child.stdout.trim()) };
}

describe("the exit watchdog", () => {
  it("is started only where process.execPath runs a script (node itself, as here)", async () => {
    const { execPathRunsScripts } = await import("../../src/core/exec-path.js");
    expect(execPathRunsScripts()).toBe(true);
  });

  it("kills a process still there past its deadline", () => {
    // Blocked for good, as an exit joining a thread that never ends.
    const { child, elapsed } = runArmed(500, "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);");
    expect(child.signal).toBe("SIGKILL");
    expect(elapsed).toBeLessThan(10_000);
    // And says why, on the process's own stderr.
    expect(child.stderr).toMatch(/^cordon: process \d+ was still exiting \(code 7\) 500 ms after process.exit: .*SIGKILL/);
  });

  it("lets a process that exits keep its code, and ends with it", async () => {
    const { child, pid } = runArmed(2000, "process.exit(5);");
    expect(child.signal).toBeNull();
    expect(child.status, child.stderr).toBe(5);
    // Its end of the pipe closed: the watchdog is gone well before its deadline.
    const until = performance.now() + 1500;
    while (watchdogsOf(pid).length > 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(watchdogsOf(pid)).toEqual([]);
  });
});
