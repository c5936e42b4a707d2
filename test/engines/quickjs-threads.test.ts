import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";

/**
 * QuickJS instances share worker threads. A guest stuck in a builtin the interrupt cannot reach
 * (a join over 2^32-1 holes) holds its thread until the thread is ended (STUCK_MS, 3 s after the
 * stop): what it costs other tenants must stay there.
 */
const STUCK = "export default () => { const a = []; a.length = 2 ** 32 - 1; return a.join('').length }";
const STUCK_MS = 3000;

describe.each(["inprocess", "process"] as const)("quickjs/%s: a thread held by a stuck guest", (host) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ engine: "quickjs", host });
    await sandbox.run({ code: "export default 1" });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
    const started = performance.now();
    const value = await work();
    return [value, performance.now() - started];
  }

  // why: the spares and warm instances made on the thread were lost with it but still handed
  // out: a one-off run on a lost spare waited its whole wall time (ERR_WALL_TIMEOUT after 5 s),
  // a prefix's call on a lost warm instance failed at once with ERR_INSTANCE_RESET.
  it("spares and warm instances lost with the thread are replaced, not handed out", async () => {
    const prefixes = await Promise.all(
      [1, 2, 3, 4].map((n) => sandbox.prepare({ code: `export const f = () => ${n}; export default (x) => x + ${n}` })),
    );
    const stuck = await sandbox.run({ code: STUCK, limits: { cpuTimeMs: 100 } });
    expect(stuck.ok ? "completed" : stuck.error.code).toBe("ERR_CPU_TIMEOUT");
    await new Promise((resolve) => setTimeout(resolve, STUCK_MS + 500));
    for (let k = 0; k < 6; k++) {
      const [result, ms] = await timed(() => sandbox.run({ code: "export default 5" }));
      expect(result.ok ? result.value : result.error.code).toBe(5);
      expect(ms).toBeLessThan(1500);
    }
    for (const [i, prefix] of prefixes.entries()) {
      const [called, callMs] = await timed(() => prefix.call({ export: "f" }));
      expect(called.ok ? called.value : called.error.code).toBe(i + 1);
      expect(callMs).toBeLessThan(1500);
      const [ran, runMs] = await timed(() => prefix.run({ code: "export default 10", input: 0 }));
      expect(ran.ok ? ran.value : ran.error.code).toBe(10);
      expect(runMs).toBeLessThan(1500);
      await prefix.dispose();
    }
  }, 20_000);

  // why: while the stopped guest held its thread, new instances still went to it (the least
  // loaded thread, once the stuck instance was detached) and the spares made on it were handed
  // out: those runs waited for the stuck guest and failed with the thread after 3 s.
  it("runs made while the thread is held go to other threads", async () => {
    const prefix = await sandbox.prepare({ code: "export const f = () => 7" });
    const stuck = await sandbox.run({ code: STUCK, limits: { cpuTimeMs: 100 } });
    expect(stuck.ok ? "completed" : stuck.error.code).toBe("ERR_CPU_TIMEOUT");
    for (let k = 0; k < 6; k++) {
      const [result, ms] = await timed(() => sandbox.run({ code: "export default 5" }));
      expect(result.ok ? result.value : result.error.code).toBe(5);
      expect(ms).toBeLessThan(1500);
      const [called, callMs] = await timed(() => prefix.call({ export: "f" }));
      expect(called.ok ? called.value : called.error.code).toBe(7);
      expect(callMs).toBeLessThan(1500);
    }
    await prefix.dispose();
    // Past the thread's end, everything still runs.
    await new Promise((resolve) => setTimeout(resolve, STUCK_MS + 500));
    const after = await sandbox.run({ code: "export default 6" });
    expect(after.ok ? after.value : after.error.code).toBe(6);
  }, 20_000);
});
