import { describe, expect, it } from "vitest";
import { WATCHDOG_TICK_MS, Watchdog, currentProcessCpuUs } from "../../src/engines/watchdog.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function spin(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {}
}

describe("the watchdog", () => {
  it("checks what it watches after an idle spell, and stops when nothing is left", async () => {
    const watchdog = new Watchdog();
    const checks: number[] = [];
    const item = { checkLimits: (_now: number, cpu: number) => checks.push(cpu) };
    for (let spell = 0; spell < 3; spell++) {
      checks.length = 0;
      const begun = performance.now();
      watchdog.watch(item);
      // Watched twice in one task: one interval, not two (at most a check a tick).
      watchdog.watch(item);
      await sleep(WATCHDOG_TICK_MS * 10);
      expect(checks.length).toBeGreaterThanOrEqual(2);
      expect(checks.length).toBeLessThanOrEqual((performance.now() - begun) / WATCHDOG_TICK_MS + 1);
      watchdog.unwatch(item);
      await sleep(WATCHDOG_TICK_MS * 3);
      const seen = checks.length;
      await sleep(WATCHDOG_TICK_MS * 6);
      expect(checks.length).toBe(seen);
    }
  });

  it("gives an execution after an idle spell a CPU reading from its start, not from before the spell", async () => {
    const watchdog = new Watchdog();
    const item = { checkLimits: () => {} };
    // CPU the host spends while nothing is watched is not the next guest's: a reading from
    // before it would let the guest be charged its wall time on a busy core (Execution.cpuMs).
    const before = currentProcessCpuUs();
    // Spun until the process has used 40 ms of CPU (a wall-time spin got 27 ms of it on a loaded CI).
    while (currentProcessCpuUs() - before < 40_000) spin(1);
    watchdog.watch(item);
    const after = currentProcessCpuUs();
    expect(watchdog.processCpuUs - before).toBeGreaterThanOrEqual(30_000);
    expect(watchdog.processCpuUs).toBeLessThanOrEqual(after);
    watchdog.unwatch(item);
    await sleep(WATCHDOG_TICK_MS * 3);
  });
});
