import { availableParallelism } from "node:os";
import { afterEach, describe, expect, it } from "vitest";
import { Bindings } from "../../src/core/bindings.js";
import { resolveLimits } from "../../src/core/limits.js";
import { normalizeSource } from "../../src/core/source.js";
import { ProcessHost } from "../../src/hosts/process/host.js";

/**
 * Prepares forwarded to the process host at once, as the executor does with its slots free:
 * their frames queue on the worker's stdin faster than any worker reads them. A worker that
 * reads them steadily is healthy, however long the queue.
 */
const hosts: ProcessHost[] = [];
afterEach(async () => {
  for (const host of hosts.splice(0)) await host.dispose();
});

function processHost(): ProcessHost {
  const engineOptions = {
    memoryMb: 128,
    spares: 0,
    budgetBytes: 1024 * 1024 * 1024,
    coalesceAbove: availableParallelism(),
    maxInstances: 64,
    maxQueued: 10_000,
    busyPollMs: 0,
  };
  const pool = {
    min: 1,
    softCap: 1,
    idleTtlMs: 60_000,
    maxRunsPerWorker: 10_000,
    rssSlackMb: 256,
    isolateProcesses: "shared" as const,
  };
  const host = new ProcessHost("v8", engineOptions, pool, 0);
  hosts.push(host);
  return host;
}

describe("a burst of large prepares sent straight to the process host", () => {
  it("40 prepares of 512 KiB to 1 MiB at once: every one evaluates, the worker is not retired", async () => {
    const count = 40;
    const sources = [];
    for (let i = 0; i < count; i++) {
      const size = 512 * 1024 + Math.floor((i / count) * 512 * 1024);
      sources.push(await normalizeSource(`export const id = ${i}; export const blob = "${"a".repeat(size)}";`));
    }
    const host = processHost();
    const limits = resolveLimits({ wallTimeMs: 60_000 }, {}, {});
    const prepared = await Promise.all(
      sources.map((source, i) =>
        host.prepare({ key: `k${i}`, source, sourceImports: {}, bindings: new Bindings({}, {}), limits, host: "process" }),
      ),
    );
    const failed = prepared.filter((p) => !p.result.ok).map((p) => !p.result.ok && p.result.error.message);
    expect(failed).toEqual([]);
    expect(host.stats().workers).toHaveLength(1);
  }, 120_000);
});
