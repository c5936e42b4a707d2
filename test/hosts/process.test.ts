import { spawn, spawnSync } from "node:child_process";
import { readFileSync, readlinkSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { outcome as code } from "../conformance/results.js";
import { alive, disposedAfterEach, until, workerPids } from "../helpers/processes.js";

/** The supervision the process host adds, tested against real worker processes. */
const kept = disposedAfterEach();
async function sandbox(options: Parameters<typeof createSandbox>[0] = {}): Promise<Sandbox> {
  return kept(await createSandbox({ host: "process", ...options }));
}

describe("process host", () => {
  it("a worker killed from outside fails only its run; a run in another worker and later runs succeed", async () => {
    const s = await sandbox({ workers: { min: 2 } });
    await s.run({ code: "export default 1" });
    await until(() => workerPids(s).length === 2);
    const slow = { code: "export default () => new Promise((r) => setTimeout(() => r('slept'), 800))" };
    const first = s.run(slow);
    await until(() => (s.stats().workers ?? []).some((w) => w.busy === 1));
    const second = s.run(slow);
    await until(() => (s.stats().workers ?? []).filter((w) => w.busy === 1).length === 2);
    const victim = (s.stats().workers ?? []).find((w) => w.busy === 1);
    if (!victim) throw new Error("no busy worker");
    process.kill(victim.pid, "SIGKILL");
    const results = await Promise.all([first, second]);
    expect(results.map(code).sort()).toEqual(["ERR_INSTANCE_RESET", "completed"]);
    const reset = results.find((r) => !r.ok);
    if (reset && !reset.ok) expect(reset.error.message).toMatch(/lost|exited|SIGKILL/);
    const later = await Promise.all([1, 2, 3].map((n) => s.run({ code: "export default (n) => n * 2", input: n })));
    expect(later.map((r) => r.ok && r.value)).toEqual([2, 4, 6]);
    expect(alive(process.pid)).toBe(true);
  });

  it("the RSS watchdog kills a worker past its budget: ERR_MEMORY_LIMIT, and the next run succeeds", async () => {
    // A hard per-worker cap well under what the guest may allocate inside its own isolate limit:
    // the guest's ArrayBuffers grow the worker's resident size, which only the watchdog sees.
    const s = await sandbox({ workers: { maxRssMb: 160 } });
    const result = await s.run({
      code: "export default async () => { const keep = []; for (let i = 0; i < 60; i++) { keep.push(new Uint8Array(8 * 1024 * 1024).fill(1)); await new Promise((r) => setTimeout(r, 5)); } return keep.length }",
      limits: { memoryMb: 1024, wallTimeMs: 10_000 },
    });
    expect(code(result)).toBe("ERR_MEMORY_LIMIT");
    if (!result.ok) expect(result.error.message).toMatch(/resident size reached \d+ MB, past its budget of 160 MB/);
    const next = await s.run({ code: "export default 'ok'" });
    expect(next.ok && next.value).toBe("ok");
  });

  it("the watchdog blames one run, not its neighbours: a sleeping run in the killed worker gets ERR_INSTANCE_RESET", async () => {
    const s = await sandbox({ workers: { min: 1, max: 1, maxRssMb: 160 } });
    await s.run({ code: "export default 1" });
    const innocent = s.run({ code: "export default () => new Promise((r) => setTimeout(() => r('slept'), 3000))" });
    await until(() => (s.stats().workers ?? []).some((w) => w.busy === 1));
    const hog = s.run({
      code: "export default async () => { const keep = []; for (let i = 0; i < 40; i++) { keep.push(new Uint8Array(8 * 1024 * 1024).fill(1)); await new Promise((r) => setTimeout(r, 10)); } return keep.length }",
      limits: { memoryMb: 512, wallTimeMs: 10_000 },
    });
    const [i, h] = await Promise.all([innocent, hog]);
    expect(code(h)).toBe("ERR_MEMORY_LIMIT");
    // Before: ERR_MEMORY_LIMIT for both.
    expect(code(i)).toBe("ERR_INSTANCE_RESET");
    if (!i.ok) expect(i.error.message).toMatch(/killed for another run's memory: its resident size reached/);
  });

  it("workers start with nothing of the host's environment, a private directory and a raised oom_score_adj", async () => {
    process.env.CORDON_TEST_SECRET = "must-not-leak";
    try {
      const s = await sandbox();
      await s.run({ code: "export default 1" });
      const [pid] = workerPids(s);
      const environ = readFileSync(`/proc/${pid}/environ`, "latin1");
      // Only glibc's malloc setting (spawn.ts), nothing of the host's.
      expect(environ.split("\0").filter(Boolean)).toEqual(["MALLOC_MMAP_THRESHOLD_=131072", "MALLOC_TOP_PAD_=1048576"]);
      expect(readlinkSync(`/proc/${pid}/cwd`)).toMatch(/cordon-worker-/);
      expect(readFileSync(`/proc/${pid}/oom_score_adj`, "latin1").trim()).toBe("1000");
      const guest = await s.run({
        code: "export default () => [typeof process, typeof require, globalThis.CORDON_TEST_SECRET ?? null]",
      });
      expect(guest.ok && guest.value).toEqual(["undefined", "undefined", null]);
    } finally {
      delete process.env.CORDON_TEST_SECRET;
    }
  });

  // isolated-vm needs the flag (decision 002); Node starts ~55 ms faster without it, and a QuickJS worker never loads isolated-vm.
  it.each([
    ["v8", true],
    ["quickjs", false],
  ] as const)("a %s worker runs with --no-node-snapshot: %s", async (engine, flagged) => {
    const s = await sandbox({ engine });
    const run = await s.run({ code: "export default () => 6 * 7" });
    expect(run.ok && run.value).toBe(42);
    const [pid] = workerPids(s);
    const args = readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0");
    expect(args.includes("--no-node-snapshot")).toBe(flagged);
  });

  it("recycles a worker after its maximum number of runs", async () => {
    const s = await sandbox({ workers: { maxRunsPerWorker: 3 } });
    for (let i = 0; i < 3; i++) await s.run({ code: "export default 1" });
    const [first] = workerPids(s);
    await until(() => !alive(first), 5000);
    const next = await s.run({ code: "export default 2" });
    expect(next.ok && next.value).toBe(2);
    expect(workerPids(s)).not.toContain(first);
  });

  it("a worker takes no run past maxRunsPerWorker, however fast the runs come", async () => {
    // Checked only on the once-a-second lifecycle timer, one worker took 20 back-to-back runs with a limit of 3.
    const s = await sandbox({ workers: { maxRunsPerWorker: 3 } });
    let most = 0;
    for (let i = 0; i < 12; i++) {
      expect((await s.run({ code: "export default 1" })).ok).toBe(true);
      for (const worker of s.stats().workers ?? []) most = Math.max(most, worker.runs);
    }
    expect(most).toBeLessThanOrEqual(3);
  });

  it("a prefix disposed while it is prepared again in a new worker leaves nothing there", async () => {
    // dispose() found no worker to tell, and the new copy stayed in the new worker for good.
    const s = await sandbox({ workers: { min: 1, max: 2 } });
    const prefix = await s.prepare({
      code: "await init(); export function get() { return 1 }",
      globals: { init: () => new Promise((resolve) => setTimeout(resolve, 600)) },
      limits: { wallTimeMs: 10_000 },
    });
    for (const pid of workerPids(s)) process.kill(pid, "SIGKILL");
    await until(() => workerPids(s).every((pid) => !alive(pid)), 5000);
    const call = prefix.call({ export: "get" }); // prepares it again in a new worker: 600 ms
    await new Promise((resolve) => setTimeout(resolve, 200));
    await prefix.dispose();
    await call;
    await until(() => s.stats().warmInstances === 0 && s.stats().prefixes.length === 0, 5000);
    expect(s.stats()).toMatchObject({ warmInstances: 0, idleInstances: 0, prefixes: [] });
  });

  it("warm calls do not count toward recycling: they make nothing a worker must shed", async () => {
    const s = await sandbox({ workers: { maxRunsPerWorker: 3 } });
    await using prefix = await s.prepare({ code: "export const inc = (n) => n + 1" });
    const [pid] = workerPids(s);
    for (let i = 0; i < 20; i++) {
      const result = await prefix.call({ export: "inc", args: [i] });
      expect(result.ok && result.value).toBe(i + 1);
    }
    expect(workerPids(s)).toEqual([pid]);
    expect(s.stats().workers?.[0].runs).toBeLessThan(3);
  });

  it("stats are exact once the worker is idle, though answers under load skip them", async () => {
    const s = await sandbox({ workers: { min: 1, max: 1 } });
    await using a = await s.prepare({ code: "export const f = (n) => n" });
    await using b = await s.prepare({ code: "export const g = (n) => -n" });
    // why: the worker sends stats with an answer only when they changed and it is idle, or every
    // 100 ms while busy; the answer that leaves it idle must carry the final counts.
    const calls = Array.from({ length: 60 }, (_, i) =>
      i % 2 ? a.call({ export: "f", args: [i] }) : b.call({ export: "g", args: [i] }),
    );
    expect((await Promise.all(calls)).every((r) => r.ok)).toBe(true);
    const counts = s.stats().prefixes.filter((p) => p.key === a.key.slice(0, 16) || p.key === b.key.slice(0, 16));
    expect(counts).toHaveLength(2);
    for (const c of counts) expect(c).toMatchObject({ busy: 0, queued: 0 });
    expect(counts.every((c) => c.idle >= 1)).toBe(true);
    // A disposed prefix leaves the figures within a round trip, not at the next poll (a second):
    // by the answer of a call sent after the dispose on the same pipe (an order, not a time bound:
    // one of 300 ms is what a loaded machine's pauses break).
    await a.dispose();
    expect(await b.call({ export: "g", args: [1] })).toMatchObject({ ok: true, value: -1 });
    expect(s.stats().prefixes.some((p) => p.key === a.key.slice(0, 16))).toBe(false);
    expect(s.stats().prefixes.some((p) => p.key === b.key.slice(0, 16))).toBe(true);
  });

  it("grows past one busy worker, and ends idle workers beyond the minimum after their TTL", async () => {
    // The TTL gives the new worker time to be seen (beside a loaded suite, a 300 ms one ended it
    // before the 20 ms polls below ran again) and is still short enough to wait out.
    const s = await sandbox({ workers: { min: 1, max: 2, idleTtlMs: 1500 } });
    await s.run({ code: "export default 0" });
    // Long enough that the second run still finds the first worker busy on a loaded machine (with
    // 600 ms a CI run saw it free again, and no second worker ever started).
    const slow = { code: "export default () => new Promise((r) => setTimeout(() => r(1), 3000))" };
    const first = s.run(slow);
    await until(() => (s.stats().workers ?? []).some((w) => w.busy === 1));
    // A run that finds the only worker busy makes the pool start a second one (for the runs after it).
    const second = s.run(slow);
    await until(() => workerPids(s).length === 2, 10_000);
    expect((await Promise.all([first, second])).map((r) => r.ok && r.value)).toEqual([1, 1]);
    // Both idle now; past the TTL the pool goes back to its minimum of one.
    await until(() => workerPids(s).length === 1, 10_000);
    expect((await s.run({ code: "export default 'still serving'" })).ok).toBe(true);
  });

  it("past the soft cap the pool grows rather than failing, then ends idle workers down to its minimum; prefixes come back cold", async () => {
    const s = await sandbox({ isolateProcesses: "partition", workers: { min: 1, max: 1 } });
    const code = "export function who() { return 'here' }";
    const prefixes = [];
    for (const tenant of ["a", "b", "c"]) {
      const prefix = await s.prepare({ code, partitionKey: tenant });
      await prefix.call({ export: "who" });
      prefixes.push(prefix);
    }
    // The pool grew past its cap rather than failing anything; idle, it shrinks back.
    await until(() => (s.stats().workers ?? []).filter((w) => w.partition !== "").length === 0, 5000);
    const again = await prefixes[0].call({ export: "who" });
    expect(again.ok && again.value).toBe("here");
    expect(again.stats.warm).toBe(false);
  });

  it("a worker still starting is never ended as idle past the soft cap: the run waiting for it succeeds", async () => {
    const entry = fileURLToPath(new URL("../fixtures/slow-start-worker.mjs", import.meta.url));
    const s = await sandbox({ isolateProcesses: "partition", workers: { min: 1, max: 1, entry } as never });
    // Tenant a's worker is busy, so tenant b's new worker takes the pool past its cap while it starts.
    const busy = s.run({ code: "export default () => new Promise((r) => setTimeout(r, 4000))", limits: { wallTimeMs: 10_000 } });
    await until(() => (s.stats().workers ?? []).some((w) => w.busy > 0), 10_000);
    const prefix = await s.prepare({ code: "export const who = () => 'b'", partitionKey: "b" });
    const result = await prefix.call({ export: "who" });
    expect(result.ok && result.value).toBe("b");
    expect((await busy).ok).toBe(true);
  }, 30_000);

  it("a worker that is slow but still talking is not ended at the backstop: its late answer arrives", async () => {
    const entry = fileURLToPath(new URL("../fixtures/fake-worker.mjs", import.meta.url));
    const s = await sandbox({ workers: { entry } as never });
    // Wall 200 ms: the backstop comes at 1.2 s, the answer at 2.5 s; stats polls are answered meanwhile.
    const result = await s.run({ code: "export default 1", limits: { wallTimeMs: 200 } });
    expect(result.ok && result.value).toBe("late");
  }, 20_000);

  it("a hung worker is ended: the overdue run fails with ERR_WALL_TIMEOUT, the others in it with ERR_INSTANCE_RESET", async () => {
    const entry = fileURLToPath(new URL("../fixtures/hung-worker.mjs", import.meta.url));
    const s = await sandbox({ workers: { entry } as never });
    const [overdue, bystander] = await Promise.all([
      s.run({ code: "export default 1", limits: { wallTimeMs: 200 } }),
      s.run({ code: "export default 2", limits: { wallTimeMs: 20_000 } }),
    ]);
    expect(code(overdue)).toBe("ERR_WALL_TIMEOUT");
    if (!overdue.ok) expect(overdue.error.message).toMatch(/stopped answering/);
    expect(code(bystander)).toBe("ERR_INSTANCE_RESET");
    if (!bystander.ok) expect(bystander.error.message).toMatch(/another run in this worker stopped answering/);
  }, 20_000);

  it("warm calls keep succeeding across recycles: a prefix moves off a retiring worker before it ends", async () => {
    const s = await sandbox({ workers: { min: 1, max: 2, maxRunsPerWorker: 50 } });
    await using prefix = await s.prepare({ code: "export const add = (a, b) => a + b" });
    const pids = new Set<number>();
    const failures: string[] = [];
    // Calls arrive as separate events (as requests to a service do), so the pool's lifecycle turn
    // runs between them: it ends a retiring worker the moment it is idle. One-off runs (calls do
    // not count) retire the prefix's worker now and then. Until two recycles were seen (each takes
    // 50 runs, ~200 iterations; under the whole suite's load that took over 3.5 s), within 20 s.
    const until = performance.now() + 20_000;
    for (let i = 0; pids.size <= 2 && performance.now() < until; i++) {
      if (i % 4 === 0) await s.run({ code: "export default 0" });
      const result = await prefix.call({ export: "add", args: [i, 1] });
      if (!result.ok) failures.push(result.error.message);
      for (const pid of workerPids(s)) pids.add(pid);
      await new Promise((r) => setImmediate(r));
    }
    expect(failures).toEqual([]);
    expect(pids.size).toBeGreaterThan(2);
  }, 30_000);

  it("calls run under their own limits, also when the host leaves out limits that did not change", async () => {
    const s = await sandbox({ workers: { max: 1 } });
    const spinner = "export function spin(ms) { const end = Date.now() + ms; while (Date.now() < end) {} return ms }";
    const [a, b] = [await s.prepare({ code: spinner }), await s.prepare({ code: `${spinner}\nexport const b = 1` })];
    const loose = { cpuTimeMs: 5000 };
    const tight = { cpuTimeMs: 50 };
    // why: the worker keeps each prefix's last call limits; an omitted set must be that prefix's
    // latest, never another prefix's nor an older one.
    const steps: [typeof a, object, string][] = [
      [a, loose, "completed"],
      [a, tight, "ERR_CPU_TIMEOUT"],
      [a, { ...loose }, "completed"],
      [a, { ...loose }, "completed"],
      [b, tight, "ERR_CPU_TIMEOUT"],
      [a, { ...loose }, "completed"],
      [b, tight, "ERR_CPU_TIMEOUT"],
      [a, tight, "ERR_CPU_TIMEOUT"],
      [a, tight, "ERR_CPU_TIMEOUT"],
    ];
    for (const [prefix, limits, expected] of steps) {
      expect(code(await prefix.call({ export: "spin", args: [300], limits }))).toBe(expected);
    }
  });

  it("a worker that writes garbage on its pipe is retired and only its request fails", async () => {
    const entry = fileURLToPath(new URL("../fixtures/garbage-worker.mjs", import.meta.url));
    const s = await sandbox({ workers: { entry } as never });
    await until(() => workerPids(s).length === 1);
    const [pid] = workerPids(s);
    const result = await s.run({ code: "export default 1" });
    expect(code(result)).toBe("ERR_INSTANCE_RESET");
    if (!result.ok) expect(result.error.message).toMatch(/protocol error: a frame was not JSON/);
    await until(() => !alive(pid));
  });

  it("an unreadable value answer (stats not numbers, value not codec text) retires the worker and fails only its run", async () => {
    for (const fixture of ["bad-value-worker.mjs", "bad-value-text-worker.mjs"]) {
      const entry = fileURLToPath(new URL(`../fixtures/${fixture}`, import.meta.url));
      const s = await sandbox({ workers: { entry } as never });
      await until(() => workerPids(s).length === 1);
      const [pid] = workerPids(s);
      const result = await s.run({ code: "export default 1" });
      expect(code(result), fixture).toBe("ERR_INSTANCE_RESET");
      if (!result.ok) expect(result.error.message).toMatch(/could not be read/);
      await until(() => !alive(pid));
    }
  });

  it("partition isolation gives each partition key its own worker processes", async () => {
    // max 4: with the default soft cap (2 cores) the pool may evict tenant-a's idle worker while
    // tenant-b's starts, as it should, and a loaded machine gave its timer time to do so.
    const s = await sandbox({ isolateProcesses: "partition", workers: { max: 4 } });
    const prefixCode = "export function pid() { return 0 }";
    const a = await s.prepare({ code: prefixCode, partitionKey: "tenant-a" });
    const b = await s.prepare({ code: prefixCode, partitionKey: "tenant-b" });
    await a.call({ export: "pid" });
    await b.call({ export: "pid" });
    const partitions = (s.stats().workers ?? []).map((w) => w.partition);
    expect(partitions).toEqual(expect.arrayContaining(["tenant-a", "tenant-b"]));
    const pids = new Map((s.stats().workers ?? []).map((w) => [w.partition, w.pid]));
    expect(pids.get("tenant-a")).not.toBe(pids.get("tenant-b"));
  });

  it("partition isolation gives one-off runs their key's worker processes too", async () => {
    // Found by a red-team pass: one-off runs of every key shared the keyless worker, so a tenant's
    // stuck guest could reset another tenant's runs there.
    const s = await sandbox({ isolateProcesses: "partition", workers: { max: 4 } });
    const prefix = await s.prepare({ code: "export const who = () => 'a'", partitionKey: "tenant-a" });
    await prefix.call({ export: "who" });
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const wait = { code: "export default async () => { await hold(); return 1 }", globals: { hold: () => held } };
    const runs = [s.run({ ...wait, partitionKey: "tenant-a" }), s.run({ ...wait, partitionKey: "tenant-b" })];
    await until(() => (s.stats().workers ?? []).filter((w) => w.busy > 0).length === 2, 10_000);
    const busy = (s.stats().workers ?? []).filter((w) => w.busy > 0).map((w) => w.partition);
    release();
    expect((await Promise.all(runs)).map((r) => r.ok && r.value)).toEqual([1, 1]);
    expect(busy.sort()).toEqual(["tenant-a", "tenant-b"]);
  });

  it("a prefix whose worker died is prepared again elsewhere, cold", async () => {
    const s = await sandbox();
    const prefix = await s.prepare({ code: "let n = 0; export function next() { return ++n }" });
    expect((await prefix.call({ export: "next" })).ok).toBe(true);
    const killed = workerPids(s);
    for (const pid of killed) process.kill(pid, "SIGKILL");
    await until(() => workerPids(s).length > 0 && workerPids(s).every((pid) => !killed.includes(pid)));
    const after = await prefix.call({ export: "next" });
    expect(after.ok && after.value).toBe(1);
    expect(after.stats.warm).toBe(false);
  });

  it("Ctrl-C and a hang-up sent to the process group leave the workers running: runs in flight finish", async () => {
    // cordon serve drains on SIGINT and SIGHUP; its workers, in the same process group, died of them.
    const s = await sandbox();
    await s.run({ code: "export default 1" });
    const pids = workerPids(s);
    const run = s.run({ code: "export default () => new Promise((r) => setTimeout(() => r('finished'), 600))" });
    await new Promise((r) => setTimeout(r, 150));
    for (const pid of pids) {
      process.kill(pid, "SIGINT");
      process.kill(pid, "SIGHUP");
    }
    expect(code(await run)).toBe("completed");
    for (const pid of pids) expect(alive(pid)).toBe(true);
  });

  it("a worker that cannot be started (temp dir unwritable) fails the run waiting for it; the host lives on", async () => {
    const s = await sandbox({ workers: { min: 1 } });
    await s.run({ code: "export default 1" });
    const [pid] = workerPids(s);
    const tmp = process.env.TMPDIR;
    // A missing directory stands in for a full one: mkdtemp fails either way.
    process.env.TMPDIR = "/nonexistent/cordon-test";
    try {
      // The pool replaces the dead worker from its exit handler: that must not throw.
      process.kill(pid, "SIGKILL");
      await until(() => !alive(pid));
      await new Promise((r) => setTimeout(r, 200));
      const result = await s.run({ code: "export default 2" });
      expect(code(result)).toBe("ERR_INSTANCE_RESET");
      if (!result.ok) expect(result.error.message).toMatch(/could not be started.*ENOENT/);
    } finally {
      if (tmp === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = tmp;
    }
  });

  it("a worker that keeps failing to start is retried with backoff, and runs fail at once meanwhile", async () => {
    const entry = fileURLToPath(new URL("../fixtures/exit-at-start-worker.mjs", import.meta.url));
    const s = await sandbox({ workers: { min: 1, entry } as never });
    const first = await s.run({ code: "export default 1" });
    expect(code(first)).toBe("ERR_INSTANCE_RESET");
    // Idle, the pool keeps trying to get back to its minimum of one worker.
    await new Promise((r) => setTimeout(r, 3000));
    // A run may meet a retry in progress (and fail with its exit); while backing off, runs fail at once.
    let later = first;
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      later = await s.run({ code: "export default 1" });
      expect(performance.now() - started).toBeLessThan(1000);
      if (!later.ok && /in a row/.test(later.error.message)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(code(later)).toBe("ERR_INSTANCE_RESET");
    if (!later.ok) {
      expect(later.error.message).toMatch(/failed to start (\d+) times in a row \(the last: .*exited \(code 1/);
      // Back to back this was 30-47 starts in 3 s; backing off: 1, at once, then 0.5 s, 1 s, 2 s...
      const starts = Number(/failed to start (\d+) times/.exec(later.error.message)?.[1]);
      expect(starts).toBeLessThanOrEqual(6);
    }
  });

  it("no worker outlives dispose", async () => {
    const s = await createSandbox({ host: "process", workers: { min: 2 } });
    await s.run({ code: "export default 1" });
    await until(() => workerPids(s).length === 2);
    const pids = workerPids(s);
    await s.dispose();
    for (const pid of pids) expect(alive(pid)).toBe(false);
  });
});

describe("process host and the host's exit", () => {
  it("a sandbox nobody disposed does not keep its process alive, and leaves no worker behind", async () => {
    const entry = fileURLToPath(new URL("../../dist/index.js", import.meta.url));
    const script = `const { createSandbox } = await import(${JSON.stringify(entry)});
      const sandbox = await createSandbox({ host: "process" });
      const result = await sandbox.run({ code: "export default 41 + 1" });
      console.log(result.ok && result.value, sandbox.stats().workers.map((w) => w.pid).filter((pid) => pid > 0).join(","));`;
    // why: 40 s, not 20: it failed once at 20 s while the whole suite loaded both cores, and never
    // alone (12 runs) or eight at a time (32 runs), all under 2.5 s. A hang still fails, and says how.
    const started = performance.now();
    const child = spawnSync(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 40_000,
    });
    const took = `${Math.round(performance.now() - started)} ms, signal ${child.signal}, stdout ${JSON.stringify(child.stdout)}`;
    expect(child.status, `${took}; stderr: ${child.stderr}`).toBe(0);
    const [value, pids] = child.stdout.trim().split(" ");
    expect(value).toBe("42");
    // The worker sees its stdin close when the host exits, and exits too.
    await until(() =>
      pids
        .split(",")
        .map(Number)
        .every((pid) => !alive(pid)),
    );
  }, 60_000);

  it("a host killed with SIGKILL leaves no worker behind, even one whose guest is spinning", async () => {
    const entry = fileURLToPath(new URL("../../dist/index.js", import.meta.url));
    const script = `const { createSandbox } = await import(${JSON.stringify(entry)});
      const sandbox = await createSandbox({ host: "process", engine: "v8", workers: { min: 1, max: 1 } });
      await sandbox.run({ code: "export default 1" });
      sandbox.run({ code: "export default () => { for (;;) {} }", limits: { cpuTimeMs: 20000, wallTimeMs: 20000 } });
      setTimeout(() => console.log(sandbox.stats().workers.map((w) => w.pid).filter((pid) => pid > 0).join(",")), 300);
      setInterval(() => {}, 1000);`;
    const host = spawn(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const line = await new Promise<string>((resolve) => host.stdout.once("data", (d) => resolve(String(d))));
    const pids = line.trim().split(",").map(Number);
    expect(pids.length).toBeGreaterThan(0);
    host.kill("SIGKILL");
    try {
      // Before: the worker spun on (its exit waited for the isolate) until its 20 s limit.
      // Generous for a loaded machine; still far inside the 20 s the guest would otherwise spin.
      await until(() => pids.every((pid) => !alive(pid)), 5000);
    } finally {
      for (const pid of pids.filter(alive)) process.kill(pid, "SIGKILL");
    }
  }, 30_000);
});
