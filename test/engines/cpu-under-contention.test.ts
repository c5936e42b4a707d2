import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { shareCoreWithSpinner } from "../helpers/busy-core.js";

/**
 * While a crossing runs, isolated-vm's CPU reading (and the QuickJS worker's) is the wall time
 * since it began: a spinning guest sharing its core was stopped after about half of its CPU limit
 * and charged all of it. The guest's threads are this process's: the process's own CPU time
 * bounds the guest's, and the watchdog charges the smaller of the two.
 */
describe("a CPU limit on a busy core", () => {
  let busy: Awaited<ReturnType<typeof shareCoreWithSpinner>> | undefined;

  beforeAll(async () => {
    busy = await shareCoreWithSpinner();
  });

  afterAll(() => busy?.release());

  for (const engine of ["v8", "quickjs"] as const) {
    it(`${engine}: the guest is stopped once it has used its limit, not once that much time passed`, async () => {
      await using sandbox = await createSandbox({ engine, host: "inprocess" });
      const cpuTimeMs = 300;
      // Spares, and QuickJS's thread and template, are made first: their CPU is this process's too.
      expect((await sandbox.run({ code: "export default () => 1" })).ok).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      // The host's own work while nothing runs: not the guest's to be charged for (a watchdog
      // that read the process's CPU before it charged the guest its wall time again).
      const spinUntil = performance.now() + 400;
      while (performance.now() < spinUntil) {}
      const before = process.cpuUsage();
      const result = await sandbox.run({
        code: "export default () => { for (;;) {} }",
        limits: { cpuTimeMs, wallTimeMs: 20_000 },
      });
      const used = process.cpuUsage(before);
      expect(!result.ok && result.error.code).toBe("ERR_CPU_TIMEOUT");
      const processMs = (used.user + used.system) / 1000;
      // This process used at least the limit (less the watchdog's 5 ms between readings), and
      // the run is charged no more than the process used.
      expect(processMs).toBeGreaterThan(cpuTimeMs * 0.9);
      expect(result.stats.cpuMs).toBeGreaterThanOrEqual(cpuTimeMs);
      expect(result.stats.cpuMs).toBeLessThanOrEqual(processMs + 10);
    }, 30_000);
  }
});
