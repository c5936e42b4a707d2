import { performance as perf } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";

/** QuickJS guests' timers live on the host: what the guest's timer calls cost the host's event loop. */
describe("quickjs/inprocess timers", () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ engine: "quickjs", host: "inprocess" });
    await sandbox.run({ code: "export default 1" });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  // why: every setTimeout and clearTimeout was a message the host's loop handled, outside every
  // limit: a loop of them kept the host's loop busy 36% of the guest's CPU time (3.6 s for 10 s).
  // A crossing's timer changes now cross together; one set and cleared inside it never does.
  it("a loop of setTimeout and clearTimeout costs the host's loop little", async () => {
    const before = perf.eventLoopUtilization();
    const result = await sandbox.run({
      code: "export default () => { for (;;) clearTimeout(setTimeout(() => {}, 100000)) }",
      limits: { cpuTimeMs: 1500, wallTimeMs: 10_000 },
    });
    const used = perf.eventLoopUtilization(before);
    expect(result.ok ? "completed" : result.error.code).toBe("ERR_CPU_TIMEOUT");
    expect(used.active / result.stats.cpuMs).toBeLessThan(0.15);
  });

  it("timers whose delays all passed within one crossing fire in the order they fall due", async () => {
    // why: after a crossing longer than their delays both were sent at 0, in the order set, and
    // the 40 ms timer fired before the 10 ms one (seen in CI, where load stretched a 30 ms spin).
    const code = `export default async () => {
      const seen = [];
      setTimeout(() => seen.push("40"), 40);
      setTimeout(() => seen.push("10"), 10);
      setTimeout(() => seen.push("25"), 25);
      const spun = Date.now(); while (Date.now() - spun < 60) {}
      await new Promise((r) => setTimeout(r, 50));
      return seen;
    }`;
    const result = await sandbox.run({ code });
    expect(result.ok && result.value, JSON.stringify(result)).toEqual(["10", "25", "40"]);
  });

  it("timers still fire in order, with their delays counted from when they were set", async () => {
    const code = `export default async () => {
      const seen = [];
      const started = Date.now();
      setTimeout(() => seen.push("b"), 40);
      setTimeout(() => seen.push("a"), 10);
      const dropped = setTimeout(() => seen.push("never"), 20);
      clearTimeout(dropped);
      let spun = Date.now(); while (Date.now() - spun < 30) {}
      const later = setTimeout(() => seen.push("cancelled later"), 60);
      await new Promise((r) => setTimeout(r, 20));
      clearTimeout(later);
      let ticks = 0;
      await new Promise((r) => { const id = setInterval(() => { if (++ticks === 3) { clearInterval(id); r(); } }, 5) });
      await new Promise((r) => setTimeout(r, 80));
      return { seen, ticks, elapsed: Date.now() - started };
    }`;
    const result = await sandbox.run({ code });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    if (!result.ok) return;
    const value = result.value as { seen: string[]; ticks: number; elapsed: number };
    expect(value.seen).toEqual(["a", "b"]);
    expect(value.ticks).toBe(3);
  });
});
