import { describe, expect, it } from "vitest";
import { WorkerPool } from "../../src/hosts/process/pool.js";

const engineOptions = {
  memoryMb: 64,
  spares: 0,
  budgetBytes: 64 * 1024 * 1024,
  coalesceAbove: 2,
  maxInstances: 4,
  maxQueued: 100,
  busyPollMs: 0,
};
const options = {
  min: 1,
  softCap: 4,
  idleTtlMs: 60_000,
  maxRunsPerWorker: 1000,
  rssSlackMb: 64,
  isolateProcesses: "shared" as const,
};

/**
 * A killed or stopped worker lives on until its exit arrives. A run the pool gave it meanwhile
 * failed with the cause it was ended for: seen in CI as "the worker process running this was lost:
 * idle past its time to live", for a run that arrived just after the pool ended its idle worker.
 */
describe("the worker pool and workers on their way out", () => {
  it.each(["killed", "stopped"] as const)("never picks a worker it has %s, even before its exit arrives", async (how) => {
    const pool = new WorkerPool("v8", { engine: "v8", engineOptions, pipePollMs: 0 }, options);
    try {
      const first = await pool.pick("");
      if (how === "killed") first.kill("ERR_INSTANCE_RESET", "idle past its time to live");
      else first.stop("idle past its time to live");
      expect(first.alive).toBe(true);
      const next = await pool.pick("");
      expect(next).not.toBe(first);
      expect(next.usable).toBe(true);
    } finally {
      await pool.dispose();
    }
  });
});
