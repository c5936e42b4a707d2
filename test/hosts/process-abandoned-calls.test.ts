import { afterAll, describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import type { Sandbox } from "../../src/sandbox.js";

/**
 * Host calls a run started and did not await, still waiting for a backed-up pipe when the run
 * ends, never leave its worker (worker-main.ts): the host would refuse them once the run's answer
 * is in, and the answer waits behind them in the run's lane. Sent, 40 runs that each started 150
 * calls of 300 KB and returned held every answer in that worker behind 1.8 GB of arguments for
 * the dead: the worker was ended at 42 s, failing 47 requests (red team).
 */
describe.each(["v8", "quickjs"] as const)("host calls a %s run leaves behind in a process worker", (engine) => {
  const sandboxes: Sandbox[] = [];
  afterAll(async () => {
    await Promise.all(sandboxes.map((sandbox) => sandbox.dispose()));
  });

  it("are dropped unsent when the run ends: its answer and a neighbour's do not wait for them", async () => {
    const sandbox = await createSandbox({ engine, host: "process", workers: { min: 1, max: 1 }, maxConcurrentRuns: 16 });
    sandboxes.push(sandbox);
    expect((await sandbox.run({ code: "export default 1" })).ok).toBe(true);
    let calls = 0;
    const globals = {
      sink: async (text: string) => {
        calls++;
        return text.length;
      },
    };
    // 150 calls of 300 KB each (45 MB, under the 64 MB of arguments a run may have in flight).
    const code = `
      const big = "a".repeat(300_000);
      for (let i = 0; i < 150; i++) sink(big).catch(() => {});
      export default "returned";`;
    const limits = { memoryMb: 256, wallTimeMs: 60_000, cpuTimeMs: 60_000 };
    const runs = Array.from({ length: 6 }, () => sandbox.run({ code, globals, limits }));
    const neighbour = sandbox.run({ code: "export default 'neighbour'" });
    const results = await Promise.all(runs);
    for (const result of results) expect(result.ok && result.value).toBe("returned");
    expect((await neighbour).ok).toBe(true);
    // 270 MB were started: the host saw only what left before the runs ended (sent, all 900).
    expect(calls).toBeLessThan(900);
    // The worker is sound: the next run is answered.
    const next = await sandbox.run({ code: "export default 2" });
    expect(next.ok && next.value).toBe(2);
  }, 120_000);
});
