import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { type RunResult, type Sandbox, createSandbox } from "../../src/index.js";
import { outcome as code } from "../conformance/results.js";
import { alive, disposedAfterEach, until, workerPids } from "../helpers/processes.js";

/**
 * A worker process a guest has taken over can write anything on its pipe. Each fixture breaks the
 * protocol one way; the host must fail only the affected work, retire the worker, keep its stats
 * and memory budget sane, and never hand a worker another prefix's host functions.
 */
const kept = disposedAfterEach();
async function sandbox(fixture: string, options: Parameters<typeof createSandbox>[0] = {}): Promise<Sandbox> {
  const entry = fileURLToPath(new URL(`../fixtures/hostile-${fixture}.mjs`, import.meta.url));
  return kept(
    await createSandbox({ host: "process", ...options, workers: { min: 1, max: 1, ...options.workers, entry } as never }),
  );
}

describe("a hostile worker process", () => {
  it("answering a run with a prepare's answer: the run fails at once and the worker is retired", async () => {
    const s = await sandbox("prepared-for-run");
    await until(() => workerPids(s).length === 1);
    const [pid] = workerPids(s);
    const result = await Promise.race([
      s.run({ code: "export default 1" }),
      new Promise<RunResult>((_, reject) => setTimeout(() => reject(new Error("the run never settled")), 5000)),
    ]);
    expect(code(result)).toBe("ERR_INSTANCE_RESET");
    if (!result.ok) expect(result.error.message).toMatch(/protocol error/);
    await until(() => !alive(pid));
  });

  it("answering with a result of the wrong shape: the caller gets ERR_INSTANCE_RESET, never a broken result", async () => {
    const s = await sandbox("bad-shape");
    await until(() => workerPids(s).length === 1);
    const [pid] = workerPids(s);
    const result = await s.run({ code: "export default 1" });
    expect(code(result)).toBe("ERR_INSTANCE_RESET");
    expect(Array.isArray(result.logs)).toBe(true);
    if (!result.ok) expect(result.error.message).toMatch(/could not be read/);
    await until(() => !alive(pid));
  });

  it("answering two runs in one values frame: both complete; with a text missing: both fail and the worker is retired", async () => {
    const honest = await sandbox("values-pair");
    await until(() => workerPids(honest).length === 1);
    const [a, b] = await Promise.all([honest.run({ code: "export default 0" }), honest.run({ code: "export default 0" })]);
    // The stand-in answers each run with its own request id: each result is its own answer.
    expect([a.ok && a.value, b.ok && b.value].sort()).toEqual([1, 2]);

    const broken = await sandbox("values-misaligned");
    await until(() => workerPids(broken).length === 1);
    const [pid] = workerPids(broken);
    const results = await Promise.all([broken.run({ code: "export default 0" }), broken.run({ code: "export default 0" })]);
    for (const result of results) {
      expect(code(result)).toBe("ERR_INSTANCE_RESET");
      if (!result.ok) expect(result.error.message).toMatch(/protocol error: a values answer/);
    }
    await until(() => !alive(pid));
  });

  // The README: a worker is retired on stats "listing more than 16 prefixes beyond the most the
  // host has had prepared in it at once". 16 is the slack: that worker keeps serving.
  it("answering stats with more prefixes than it was given: retired; within the slack: kept", async () => {
    const within = await sandbox("stats-many-16");
    await until(() => workerPids(within).length === 1);
    const [kept] = workerPids(within);
    const over = await sandbox("stats-many");
    await until(() => workerPids(over).length === 1);
    const [pid] = workerPids(over);
    await until(() => !alive(pid), 5000);
    // Polled each second: the honest-sized worker has answered at least twice by now.
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(alive(kept)).toBe(true);
    expect(workerPids(within)).toEqual([kept]);
  });

  it.each(["stats-null", "stats-weird"])(
    "reporting %s: retired at its first stats, and stats() stays numbers",
    async (fixture) => {
      const s = await sandbox(fixture);
      await until(() => workerPids(s).length === 1);
      const [pid] = workerPids(s);
      // The pool polls every worker's stats each second.
      await until(() => !alive(pid), 5000);
      const stats = s.stats();
      for (const key of ["warmInstances", "idleInstances", "idleHeapBytes", "spareInstances"] as const) {
        expect(Number.isFinite(stats[key]) && stats[key] >= 0, key).toBe(true);
      }
    },
  );

  it("reporting a huge warm heap: the RSS watchdog's budget ignores it, and kills the worker past its real budget", async () => {
    const s = await sandbox("stats-inflate", { workers: { rssSlackMb: 32 } as never });
    // The pool polls stats each second: wait until the inflated figure has been read.
    await until(() => s.stats().idleHeapBytes > 2 ** 50, 5000);
    const result = await s.run({ code: "export default 1", limits: { memoryMb: 16 } });
    expect(code(result)).toBe("ERR_MEMORY_LIMIT");
  });

  it("flooding host calls for a request that does not exist, reading nothing: retired, host memory bounded", async () => {
    const before = process.memoryUsage().rss;
    const s = await sandbox("stray-flood");
    await until(() => workerPids(s).length === 1);
    const [pid] = workerPids(s);
    // Before: each call was answered into a stdin nobody read, +756 MB in 10 s, never retired.
    await until(() => !alive(pid), 5000);
    expect(process.memoryUsage().rss - before).toBeLessThan(100 * 1024 * 1024);
  });

  it("flooding 9 MB stats frames nobody asked for: retired at the first, and the host's loop keeps turning", async () => {
    let lag = 0;
    let last = performance.now();
    const ticker = setInterval(() => {
      const now = performance.now();
      lag = Math.max(lag, now - last - 10);
      last = now;
    }, 10);
    try {
      const s = await sandbox("stats-flood");
      await until(() => workerPids(s).length === 1);
      const [pid] = workerPids(s);
      await until(() => !alive(pid), 5000);
      // A worker in its place answers; generous: each frame costs the host a parse.
      expect(lag).toBeLessThan(1000);
    } finally {
      clearInterval(ticker);
    }
  });

  it("streaming padded frames of a kind that carries no data: retired at the first one", async () => {
    // Before: 30 MB "bridge-cancel" frames, as fast as the pipe took them, held the host's loop
    // (1.7 s lags, 44 of 800 ticks) and the worker was never retired.
    const s = await sandbox("cancel-flood");
    await until(() => workerPids(s).length === 1);
    const [pid] = workerPids(s);
    await until(() => !alive(pid), 5000);
  });

  // The rule is a reading rate (at least 1 MB/s over 3 s while past 4 MB unread), not any progress:
  // a worker reading a trickle would otherwise hold the host's memory as long as it liked.
  it.each([
    ["bridge-stall", "reading nothing"],
    ["bridge-trickle", "reading ~0.5 MB/s"],
  ])(
    "%s, %s while its run's host calls are answered: retired once past 4 MB unread",
    async (fixture) => {
      const s = await sandbox(fixture);
      const chunk = "x".repeat(64 * 1024);
      const started = performance.now();
      const result = await s.run({
        code: "export default 1",
        globals: { big: async () => chunk },
        limits: { wallTimeMs: 30_000, maxBridgeCalls: 1000 },
      });
      expect(code(result)).toBe("ERR_INSTANCE_RESET");
      if (!result.ok) expect(result.error.message).toMatch(/unread, reading \d+ KB\/s/);
      // Before: held 64 MB of answers until the wall-time backstop (31 s here). The rate is judged
      // over 3 s windows, checked at the host's writes (a stats poll each second).
      expect(performance.now() - started).toBeLessThan(10_000);
    },
    40_000,
  );

  it("asking for another prefix's host function: refused; its own prefix's, while a call of it runs: served", async () => {
    const s = await sandbox("bridge-other");
    const calls = { a: 0, b: 0 };
    // The fake worker names each prefix by its prepare's request id: a is 1, b is 2.
    await s.prepare({ code: "export const x = 1", globals: { secret: async () => ++calls.a } });
    const b = await s.prepare({ code: "export const x = 1", partitionKey: "tenant-b", globals: { own: async () => ++calls.b } });
    const other = await b.call({ export: "x", args: [1] });
    expect(other.ok && other.value).toBe(false);
    expect(calls.a).toBe(0);
    const own = await b.call({ export: "x", args: [2] });
    expect(own.ok && own.value).toBe(true);
    expect(calls.b).toBe(1);
  });

  it("asking for more host calls than the run's maxBridgeCalls: retired after the limit, never past it", async () => {
    const s = await sandbox("bridge-flood");
    await until(() => workerPids(s).length === 1);
    const [pid] = workerPids(s);
    let calls = 0;
    const result = await s.run({
      code: "export default 1",
      globals: { hit: async () => ++calls },
      limits: { maxBridgeCalls: 3 },
    });
    expect(code(result)).toBe("ERR_INSTANCE_RESET");
    if (!result.ok) expect(result.error.message).toMatch(/maxBridgeCalls/);
    expect(calls).toBeLessThanOrEqual(3);
    await until(() => !alive(pid));
  });

  it("never saying ready: ended at the start timeout, and the pool does not keep handing it out", async () => {
    const s = await sandbox("never-ready");
    const children = () => {
      try {
        return execFileSync("pgrep", ["-f", "hostile-never-ready"]).toString().trim().split("\n").map(Number);
      } catch {
        return [];
      }
    };
    const running = s.run({ code: "export default 1" });
    await until(() => children().length > 0);
    const started = children();
    const result = await running;
    expect(code(result)).toBe("ERR_INSTANCE_RESET");
    if (!result.ok) expect(result.error.message).toMatch(/did not start in time/);
    // The late worker is ended (the pool starts another in its place).
    await until(() => started.every((pid) => !alive(pid)), 5000);
  }, 40_000);
});
