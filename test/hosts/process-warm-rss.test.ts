import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { outcome as code } from "../conformance/results.js";
import { disposedAfterEach, until, workerPids } from "../helpers/processes.js";

/**
 * Idle warm instances and the RSS watchdog: residency counts an instance's heap, the watchdog a
 * worker's resident size, which also holds each prefix's source in the worker and what an
 * instance keeps outside its heap. A worker's warm state alone must not get it killed, failing
 * the runs of everyone sharing it.
 */
const kept = disposedAfterEach();
async function sandbox(options: Parameters<typeof createSandbox>[0] = {}): Promise<Sandbox> {
  return kept(await createSandbox({ host: "process", ...options }));
}

/**
 * One shared worker with a small slack, and another tenant's run in flight in it (waiting until
 * `open()`): what a worker killed for warm state would fail.
 */
async function sharedWorkerWithRunInFlight() {
  const s = await sandbox({ workers: { min: 1, max: 1, rssSlackMb: 48 }, memoryBudgetMb: 1024 });
  let open: () => void = () => {};
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const innocent = s.run({
    code: "export default async () => { await gate(); return 'done' }",
    globals: { gate: () => gate },
    limits: { wallTimeMs: 25_000, memoryMb: 16 },
  });
  await until(() => (s.stats().workers ?? []).some((w) => w.busy === 1));
  const [pid] = workerPids(s);
  return { s, innocent, open, pid };
}

/** A 512 KiB prefix, distinct per `i` (one-byte text: cheap for esbuild, ~2.2 MB of isolate heap warm). */
function bigPrefix(i: number): string {
  return `const data = ${JSON.stringify(String(i).padEnd(512 * 1024, "abcdefgh"))};\nexport default () => data.length;\n`;
}

describe("process host: warm residency within the RSS watchdog's budget", () => {
  it("many idle prefixes of large code never get the shared worker killed: a run in flight completes", async () => {
    // A small slack makes the overrun come within a few dozen prefixes (before the fix: killed before
    // 30 of them, the sleeping run failing with the worker).
    const { s, innocent, open, pid } = await sharedWorkerWithRunInFlight();
    const failed: string[] = [];
    for (let i = 0; i < 40; i++) {
      const prefix = await s.prepare({ code: bigPrefix(i), limits: { memoryMb: 16 } });
      const used = await prefix.run({ code: "export default 1", limits: { memoryMb: 16 } });
      if (!used.ok) failed.push(`${i}: ${code(used)}`);
    }
    open();
    const result = await innocent;
    expect(failed).toEqual([]);
    expect(code(result)).toBe("completed");
    expect(workerPids(s)).toEqual([pid]);
    // Warm instances were kept, only as many as fit.
    expect(s.stats().idleInstances).toBeGreaterThan(0);
  }, 30_000);
});

describe("process host: warm instances holding memory their heap does not count", () => {
  it("idle prefixes each keeping an 8 MB typed array are shed, not the worker: a run in flight completes", async () => {
    // A typed array's bytes are outside the isolate's heap figure that residency counts
    // (~1 MB each here): before the fix the worker was killed after ~6 such prefixes.
    const { s, innocent, open, pid } = await sharedWorkerWithRunInFlight();
    for (let i = 0; i < 30; i++) {
      const prefix = await s.prepare({
        code: `const keep = new Uint8Array(8 * 1024 * 1024).fill(${i % 200} + 1);\nexport default () => keep.length;\n`,
        limits: { memoryMb: 16 },
      });
      const used = await prefix.call({ export: "default", args: [] });
      expect(used.ok && used.value).toBe(8 * 1024 * 1024);
    }
    open();
    expect(code(await innocent)).toBe("completed");
    expect(workerPids(s)).toEqual([pid]);
    expect(s.stats().idleInstances).toBeGreaterThan(0);
  }, 30_000);

  it("an instance's typed array leaves the worker's resident size when it is disposed, also after others were", async () => {
    // glibc's malloc raises its mmap threshold past the largest block freed: before the fix, each
    // array after the first few came from its arenas and disposing it freed ~1 MB, not ~9 (the
    // shedder then evicted every idle instance looking for the room). Measured under load: 9 MB each.
    const s = await sandbox({ workers: { min: 1, max: 1 }, memoryBudgetMb: 1024 });
    const rss = (pid: number) => Number(readFileSync(`/proc/${pid}/statm`, "latin1").split(" ")[1]) * 4096;
    const live = [];
    const freedMb: number[] = [];
    for (let i = 0; i < 14; i++) {
      const prefix = await s.prepare({
        code: `const keep = new Uint8Array(8 * 1024 * 1024).fill(${i} + 1);\nexport default () => keep.length;\n`,
        limits: { memoryMb: 16 },
      });
      await prefix.call({ export: "default", args: [] });
      live.push(prefix);
      if (live.length <= 3) continue;
      const [pid] = workerPids(s);
      const before = rss(pid);
      await live.shift()?.dispose();
      // The dispose message is on its way to the worker: give it generous time to arrive.
      await until(() => before - rss(pid) >= 6 * 1024 * 1024, 1500).catch(() => {});
      freedMb.push(Math.round((before - rss(pid)) / (1024 * 1024)));
    }
    expect(freedMb.filter((mb) => mb < 6)).toEqual([]);
  }, 30_000);

  it("a run's own memory bomb beside idle warm prefixes is still killed and blamed", async () => {
    // A hard cap under what the guest may allocate inside its own isolate limit (process.test.ts).
    const s = await sandbox({ workers: { min: 1, max: 1, maxRssMb: 220 }, memoryBudgetMb: 1024 });
    for (let i = 0; i < 5; i++) await s.prepare({ code: bigPrefix(i), limits: { memoryMb: 16 } });
    const bomb = await s.run({
      code: "export default async () => { const keep = []; for (let i = 0; i < 60; i++) { keep.push(new Uint8Array(8 * 1024 * 1024).fill(1)); await new Promise((r) => setTimeout(r, 5)); } return keep.length }",
      limits: { memoryMb: 1024, wallTimeMs: 10_000 },
    });
    expect(code(bomb)).toBe("ERR_MEMORY_LIMIT");
    if (!bomb.ok) expect(bomb.error.message).toMatch(/resident size reached \d+ MB, past its budget of 220 MB/);
  }, 30_000);
});
