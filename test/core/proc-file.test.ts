import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { ProcFile } from "../../src/core/proc-file.js";

/** CPU ticks (utime + stime) in a /proc/<pid>/stat text. */
const ticks = (stat: string) => {
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
};

describe("a /proc file kept open", () => {
  it("reads what the file says now, each time, and nothing once its process has exited", async () => {
    // Spins for 300 ms of its own CPU time after its first line (not wall time: under CI's load a
    // 300 ms wall-clock spin got 130 ms of CPU), then waits to be killed.
    const child = spawn(
      process.execPath,
      [
        "-e",
        `process.stdin.once("data", () => { const start = process.cpuUsage(); for (;;) { const used = process.cpuUsage(start); if (used.user + used.system >= 300000) break; } console.log("spun"); }); console.log("ready"); setInterval(() => {}, 1000);`,
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    await once(child.stdout, "data");
    const stat = new ProcFile(`/proc/${child.pid}/stat`);
    const before = stat.read();
    expect(before).toMatch(new RegExp(`^${child.pid} \\(node\\) `));
    child.stdin.write("go\n");
    await once(child.stdout, "data");
    const after = stat.read();
    expect(ticks(after as string) - ticks(before as string)).toBeGreaterThanOrEqual(15);
    child.kill("SIGKILL");
    await once(child, "exit");
    // Reaped: the open file stays that process's, whatever now holds its pid.
    expect(stat.read()).toBeUndefined();
    expect(stat.read()).toBeUndefined();
  });

  it("a file that cannot be opened reads as undefined, and a closed one too", () => {
    expect(new ProcFile("/proc/0/stat").read()).toBeUndefined();
    const own = new ProcFile("/proc/self/statm");
    expect(own.read()).toMatch(/^\d+ \d+ /);
    own.close();
    expect(own.read()).toBeUndefined();
  });
});
