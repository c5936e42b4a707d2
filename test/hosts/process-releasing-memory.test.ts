import { availableParallelism } from "node:os";
import { afterAll, describe, expect, it } from "vitest";
import { Bindings } from "../../src/core/bindings.js";
import { resolveLimits } from "../../src/core/limits.js";
import { normalizeSource } from "../../src/core/source.js";
import { ProcessHost } from "../../src/hosts/process/host.js";
import { ONE_OFF_RELEASE_MS, ReleasingMemory } from "../../src/hosts/process/rss-budget.js";
import { Shedder } from "../../src/hosts/process/shedder.js";

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A process worker disposes a one-off run's instance a little after answering it (worker-main.ts,
 * CLEANUP_DELAY_MS), so the run's memory stays in the worker's budget ONE_OFF_RELEASE_MS past
 * its answer, on both sides of the pipe: a watchdog look in between must not find the run's heap,
 * still resident, against a budget without it.
 */
describe("a one-off run's memory after its answer", () => {
  it("ReleasingMemory counts the largest entry of the last ONE_OFF_RELEASE_MS, never their sum", () => {
    const releasing = new ReleasingMemory();
    releasing.add(10 * MiB, 0);
    releasing.add(5 * MiB, 20);
    releasing.add(0, 30);
    expect(releasing.bytes(0)).toBe(10 * MiB);
    expect(releasing.bytes(ONE_OFF_RELEASE_MS - 1)).toBe(10 * MiB);
    expect(releasing.bytes(ONE_OFF_RELEASE_MS)).toBe(5 * MiB);
    expect(releasing.bytes(ONE_OFF_RELEASE_MS + 20)).toBe(0);
    // A stream of one-offs raises the budget by one run's memory, not by every recent run's.
    const stream = new ReleasingMemory();
    for (let at = 0; at < 1000; at++) stream.add(128 * MiB, at);
    expect(stream.bytes(999)).toBe(128 * MiB);
  });

  it("the worker's shedder keeps a one-off's memory in the budget after its answer, a call's not", async () => {
    const shedder = new Shedder(
      { idleHeapBytes: 0, shedIdle: () => 0 },
      { rule: { slackBytes: 0 }, budgetBytes: 0, maxInstances: 1, readRss: () => 0 },
    );
    shedder.began(1, 300);
    shedder.began(2, 50);
    expect(shedder.budget()).toBe(350 * MiB);
    shedder.answered(2);
    expect(shedder.budget()).toBe(300 * MiB);
    shedder.answered(1, true);
    expect(shedder.budget()).toBe(300 * MiB);
    await sleep(ONE_OFF_RELEASE_MS + 20);
    expect(shedder.budget()).toBe(0);
  });

  describe("on the host, the watchdog's count of a worker's memory in flight", () => {
    const host = new ProcessHost(
      "v8",
      {
        memoryMb: 128,
        spares: 1,
        budgetBytes: 1024 * MiB,
        coalesceAbove: availableParallelism(),
        maxInstances: 8,
        maxQueued: 100,
        busyPollMs: 0,
      },
      { min: 1, softCap: 1, idleTtlMs: 60_000, maxRunsPerWorker: 10_000, rssSlackMb: 256, isolateProcesses: "shared" },
      0,
    );
    afterAll(() => host.dispose());
    const inFlight = () => {
      // biome-ignore lint/suspicious/noExplicitAny: the pool's workers are internal; only their count of memory is read.
      const workers = (host as any).pool.list() as { memoryInFlight: number }[];
      return workers.reduce((sum, worker) => sum + worker.memoryInFlight, 0);
    };

    it("holds a one-off run's memory limit for ONE_OFF_RELEASE_MS after its answer, then drops it", async () => {
      const limits = resolveLimits({ memoryMb: 300 }, {}, {});
      const source = await normalizeSource("export default () => new Array(1000).fill(1).length");
      const result = await host.run({
        source,
        sourceImports: {},
        bindings: new Bindings({}, {}),
        inputText: "null",
        limits,
        host: "process",
      });
      expect(result).toMatchObject({ ok: true, value: 1000 });
      expect(inFlight()).toBe(300 * MiB);
      await sleep(ONE_OFF_RELEASE_MS + 100);
      expect(inFlight()).toBe(0);
    }, 60_000);

    it("drops a warm call's at once: its instance stays, counted as warm heap", async () => {
      const limits = resolveLimits({ memoryMb: 200 }, {}, {});
      const source = await normalizeSource("export function handle(n) { return n + 1 }");
      const { prefix, result } = await host.prepare({
        key: "k",
        source,
        sourceImports: {},
        bindings: new Bindings({}, {}),
        limits,
        host: "process",
      });
      expect(result.ok).toBe(true);
      await sleep(ONE_OFF_RELEASE_MS + 50);
      const called = await prefix.call({ path: "handle", argsText: "[1]", limits });
      expect(called).toMatchObject({ ok: true, value: 2 });
      expect(inFlight()).toBe(0);
      await prefix.dispose();
    }, 60_000);
  });
});
