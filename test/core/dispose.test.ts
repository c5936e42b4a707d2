import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "../conformance/matrix.js";

/**
 * sandbox.dispose() ends the work in it: runs in progress (one-off, and a prefix's runs and calls)
 * end with ERR_INSTANCE_RESET, runs still queued for a slot never start, and no guest calls the
 * host afterwards.
 */
describe.each(COMBINATIONS.filter((c) => c.host !== "remote"))("dispose on $name", (combo) => {
  it("ends runs in progress, never starts queued ones, and no host call follows it", async () => {
    const sandbox = await createSandbox({ ...combo.options, maxConcurrentRuns: 1 });
    let calls = 0;
    let disposed = false;
    let callsAfter = 0;
    const started = async () => {
      calls++;
      if (disposed) callsAfter++;
      return 1;
    };
    const code = `export default async () => { await started(); await new Promise((r) => setTimeout(r, 300)); await started(); return "finished"; }`;
    const runs = [0, 1, 2].map(() => sandbox.run({ code, globals: { started }, limits: { wallTimeMs: 5000 } }));
    const until = performance.now() + 5000;
    while (calls === 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 10));
    await sandbox.dispose();
    disposed = true;
    const results = await Promise.all(runs);
    for (const result of results) {
      expect(result.ok, JSON.stringify(result)).toBe(false);
      if (!result.ok) expect(result.error.code).toBe("ERR_INSTANCE_RESET");
    }
    await new Promise((r) => setTimeout(r, 500));
    expect(callsAfter).toBe(0);
    expect(calls).toBe(1);
  }, 20_000);

  it("ends a prefix's calls and runs in progress: a spinning guest stops, it does not run on to its limit", async () => {
    const sandbox = await createSandbox(combo.options);
    let started = 0;
    const prefix = await sandbox.prepare({
      code: "export async function spin() { await started(); while (true) {} }",
      globals: { started: async () => started++ },
    });
    const limits = { cpuTimeMs: 20_000, wallTimeMs: 30_000 };
    const call = prefix.call({ export: "spin", limits });
    const run = prefix.run({ code: "await started(); while (true) {}", limits });
    // On QuickJS the run's instance may share a thread with the spinning call and wait behind it.
    const until = performance.now() + 3000;
    while (started < 2 && performance.now() < until) await new Promise((r) => setTimeout(r, 10));
    expect(started).toBeGreaterThanOrEqual(1);
    await new Promise((r) => setTimeout(r, 100)); // spinning now
    await sandbox.dispose();
    // In process the guests spun on this process's threads: after dispose they use none of it.
    const cpuBefore = process.cpuUsage();
    await new Promise((r) => setTimeout(r, 500));
    const cpu = process.cpuUsage(cpuBefore);
    for (const result of await Promise.all([call, run])) {
      expect(result.ok, JSON.stringify(result)).toBe(false);
      if (!result.ok) expect(result.error.code).toBe("ERR_INSTANCE_RESET");
    }
    if (combo.host === "inprocess" && combo.engine !== "deno") expect((cpu.user + cpu.system) / 1000).toBeLessThan(250);
  }, 40_000);

  it("a run or prefix run asked for in the tick dispose is called never starts, and says so", async () => {
    const sandbox = await createSandbox(combo.options);
    let calls = 0;
    const globals = { hit: async () => calls++ };
    const code = "export default async () => { await hit(); return 1; }";
    const prefix = await sandbox.prepare({ code: "export const p = 1;" });
    // Cached and warm first: nothing is left for the run to wait for before it takes its slot.
    expect((await sandbox.run({ code, globals })).ok).toBe(true);
    expect((await prefix.run({ code: "export default 1" })).ok).toBe(true);
    calls = 0;
    const runs = [sandbox.run({ code, globals }), prefix.run({ code: "export default 1" })];
    await sandbox.dispose();
    for (const result of await Promise.all(runs)) {
      expect(!result.ok && result.error.code).toBe("ERR_INSTANCE_RESET");
      // Not a failure in the engine (on the process host it read as a worker recycled or lost).
      expect(!result.ok && result.error.message).toBe("the sandbox was disposed before the run started");
    }
    expect(calls).toBe(0);
  }, 20_000);
});

/**
 * A one-off run still waiting for its instance (no spare ready, or another memory size than the
 * spares') when dispose() is called never starts: before, its instance was made after dispose
 * and the guest ran to completion, calling host functions after dispose() had resolved.
 */
describe.each(["v8", "quickjs"] as const)("dispose on %s/inprocess, a run waiting for its instance", (engine) => {
  it.each([
    { name: "no spares", spareInstances: 0, memoryMb: undefined },
    { name: "another memory size than the spares'", spareInstances: 2, memoryMb: 64 },
  ])(
    "$name: ends with ERR_INSTANCE_RESET and calls nothing after dispose",
    async ({ spareInstances, memoryMb }) => {
      const sandbox = await createSandbox({ engine, host: "inprocess", spareInstances });
      let disposed = false;
      let callsAfter = 0;
      const hostCall = async () => {
        if (disposed) callsAfter++;
      };
      const code = "export default async () => { await hostCall(); return 'ran after dispose'; }";
      const limits = { wallTimeMs: 5000, ...(memoryMb ? { memoryMb } : {}) };
      // Compiled once first: a compile in progress is ended by dispose on its own.
      expect((await sandbox.run({ code, globals: { hostCall } })).ok).toBe(true);
      const runs = [0, 1, 2, 3].map(() => sandbox.run({ code, globals: { hostCall }, limits }));
      // Past the (cached) compile, while the instances are still being made.
      await new Promise((r) => setTimeout(r, 1));
      await sandbox.dispose();
      disposed = true;
      for (const result of await Promise.all(runs)) {
        expect(result.ok, JSON.stringify(result)).toBe(false);
        if (!result.ok) expect(result.error.code).toBe("ERR_INSTANCE_RESET");
      }
      await new Promise((r) => setTimeout(r, 100));
      expect(callsAfter).toBe(0);
    },
    20_000,
  );
});
