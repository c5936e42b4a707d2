import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { alive, disposedAfterEach, until } from "../helpers/processes.js";

/**
 * Recycling without a cold gap: a worker in its last tenth of maxRunsPerWorker gets a successor
 * that starts while it still serves, so the run after its last one finds a started worker
 * instead of waiting ~0.5 s for one (every maxRunsPerWorker runs, before).
 */
describe("a worn-out worker's successor", () => {
  const opened = disposedAfterEach();

  it("starts in its last tenth of runs, outlives the soft cap meanwhile, and takes over when it retires", async () => {
    const s = opened(await createSandbox({ engine: "v8", host: "process", workers: { min: 1, max: 1, maxRunsPerWorker: 20 } }));
    const started = () => (s.stats().workers ?? []).filter((w) => w.pid > 0);
    for (let i = 0; i < 18; i++) expect((await s.run({ code: `export default ${i}` })).ok).toBe(true);
    const [first] = started();
    expect(first?.runs).toBe(18);
    // None yet: 18 runs done, its successor starts with the next pick.
    expect(started()).toHaveLength(1);
    expect((await s.run({ code: "export default 18" })).ok).toBe(true);
    await until(() => started().length === 2, 15_000);
    const successor = started().find((w) => w.pid !== first?.pid);
    // Past the soft cap of 1 and idle, it is not evicted while its predecessor serves (the
    // lifecycle runs once a second).
    await new Promise((r) => setTimeout(r, 2500));
    expect(started().map((w) => w.pid)).toEqual([first?.pid, successor?.pid]);
    // The worn-out worker still takes its last run, and only that one.
    expect((await s.run({ code: "export default 19" })).ok).toBe(true);
    expect(started().find((w) => w.pid === first?.pid)?.runs).toBe(20);
    expect(await s.run({ code: "export default () => 20" })).toMatchObject({ ok: true, value: 20 });
    expect(started().find((w) => w.pid === successor?.pid)?.runs).toBe(1);
    await until(() => !alive(first?.pid as number), 10_000);
    expect(started().map((w) => w.pid)).toEqual([successor?.pid]);
  }, 60_000);

  it("is not started below ten runs a worker: recycling there is as before", async () => {
    const s = opened(await createSandbox({ engine: "v8", host: "process", workers: { min: 1, maxRunsPerWorker: 5 } }));
    for (let i = 0; i < 4; i++) expect((await s.run({ code: "export default 1" })).ok).toBe(true);
    await new Promise((r) => setTimeout(r, 500));
    expect((s.stats().workers ?? []).length).toBe(1);
    for (let i = 0; i < 6; i++) expect((await s.run({ code: "export default 1" })).ok).toBe(true);
  }, 60_000);
});
