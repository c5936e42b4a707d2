import { describe, expect, it } from "vitest";
import { createSandbox, type Sandbox } from "../../src/index.js";
import { disposedAfterEach, until } from "../helpers/processes.js";

/**
 * A prefix whose worker is recycled over and over (maxRunsPerWorker) moves to a new worker each
 * time: what the host keeps of it in the workers it left must not pile up.
 */
const kept = disposedAfterEach();

/** The host side's per-worker records, read from the live objects (no public view has them all). */
function hostRecords(s: Sandbox) {
  // biome-ignore lint/suspicious/noExplicitAny: reaching the host's private structures on purpose
  const host = (s as any).engine;
  // biome-ignore lint/suspicious/noExplicitAny: as above
  const workers = host.pool.list() as any[];
  const sizes = workers.map((w) => ({
    alive: w.alive as boolean,
    owners: w.prefixes.owners.size as number,
    bindings: w.prefixes.bindings.size as number,
    memory: w.prefixes.memory.size as number,
  }));
  return { workers: workers.length, prefixes: host.prefixes.size as number, sizes };
}

describe.each(["v8", "quickjs"] as const)("a prefix on workers recycled many times, %s", (engine) => {
  it("leaves one copy of the prefix on the host side, however many workers it went through", async () => {
    const s = kept(await createSandbox({ engine, host: "process", workers: { maxRunsPerWorker: 2 } }));
    const prefix = await s.prepare({
      code: "export const base = await base0(); export function get(n) { return n + base }",
      globals: { base0: async () => 1 },
    });
    const pids = new Set<number>();
    for (let i = 0; i < 12; i++) {
      const result = await prefix.run({ code: `export default ${i}` });
      expect(result.ok).toBe(true);
      expect(await prefix.call({ export: "get", args: [i] })).toMatchObject({ value: i + 1 });
      for (const w of s.stats().workers ?? []) pids.add(w.pid);
      // A worn-out worker is retired by the pool's next look (each pick, and every second).
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    // It did go through many workers.
    expect(pids.size).toBeGreaterThanOrEqual(4);
    // The retired workers end once idle (checked every second).
    await until(() => (s.stats().workers ?? []).length === 1, 5000);
    // A call (not counted as a run) makes sure a live worker holds the prefix.
    expect(await prefix.call({ export: "get", args: [1] })).toMatchObject({ value: 2 });
    const records = hostRecords(s);
    expect(records.prefixes).toBe(1);
    expect(records.workers).toBe(1);
    const total = records.sizes.reduce((n, w) => n + w.owners + w.bindings + w.memory, 0);
    expect(records.sizes.every((w) => w.alive)).toBe(true);
    expect(total).toBe(3);
    expect(s.stats().prefixes).toHaveLength(1);
    await prefix.dispose();
    await until(() => s.stats().prefixes.length === 0, 5000);
    const after = hostRecords(s);
    expect(after.prefixes).toBe(0);
    expect(after.sizes.reduce((n, w) => n + w.owners + w.bindings + w.memory, 0)).toBe(0);
  }, 60_000);

  it("a prefix's runs take no worker past maxRunsPerWorker, however fast they come", async () => {
    // The pool retired a worn-out worker at its next pick or once a second; a held prefix's runs
    // pick no worker, and one worker took all 12 runs with maxRunsPerWorker 2.
    const s = kept(await createSandbox({ engine, host: "process", workers: { maxRunsPerWorker: 2 } }));
    const prefix = await s.prepare({ code: "export function get(n) { return n }" });
    const pids = new Set<number>();
    for (let i = 0; i < 12; i++) {
      expect(await prefix.run({ code: `export default ${i}` })).toMatchObject({ value: i });
      for (const w of s.stats().workers ?? []) {
        pids.add(w.pid);
        expect(w.runs).toBeLessThanOrEqual(2);
      }
    }
    expect(pids.size).toBeGreaterThanOrEqual(4);
  }, 60_000);
});
