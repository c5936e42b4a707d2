import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox, PrepareError } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { completed } from "./results.js";
import { until } from "../helpers/processes.js";

/**
 * `prepare`'s signal ends its caller's wait at once. A preparation still queued for a run slot is
 * dropped once every caller waiting for it has aborted (the executor's cold /run kept every slot
 * busy with modules whose clients had gone: red team, 2026-12-05); one already evaluating runs to
 * its own limits, shared with whoever asks for it meanwhile, and is disposed when nobody holds it.
 *
 * One run slot, held by a run that waits on a host promise the test settles: the queue is real.
 */
describe.each(COMBINATIONS)("prepare's signal on $name", (combo) => {
  let sandbox: Sandbox;
  let evaluations = 0;
  let release: () => void = () => {};
  /** Top-level awaits of `held()` wait here until the test calls `release`. */
  let gate = Promise.resolve();
  const globals = {
    evaluated: async () => {
      evaluations++;
    },
    held: () => gate,
  };
  /** Generous: the tests hold runs and evaluations open across steps a loaded machine stretches. */
  const limits = { wallTimeMs: 30_000 };
  const hold = () => {
    gate = new Promise<void>((resolve) => {
      release = resolve;
    });
  };

  beforeAll(async () => {
    sandbox = await createSandbox({ ...combo.options, maxConcurrentRuns: 1 });
  });
  afterAll(async () => {
    release();
    await sandbox.dispose();
  });

  /** The one slot taken until `release`: a run awaiting `held()`. */
  async function slotTaken(): Promise<{ blocker: Promise<unknown> }> {
    hold();
    const blocker = sandbox.run({ code: "export default async () => { await held(); return 'done' }", globals, limits });
    // Until the run holds the slot, a prepare would take it.
    await until(() => sandbox.stats().activeRuns === 1);
    // In an object: an async function returning the promise itself would wait for it.
    return { blocker };
  }

  it("a queued preparation whose every caller aborted is dropped, never evaluated", async () => {
    evaluations = 0;
    const { blocker } = await slotTaken();
    const code = `await evaluated(); export const n = ${Math.random()};`;
    const first = new AbortController();
    const second = new AbortController();
    const waits = [
      sandbox.prepare({ code, globals, signal: first.signal, limits }),
      sandbox.prepare({ code, globals, signal: second.signal, limits }),
    ];
    await until(() => sandbox.stats().queueDepth === 1);
    first.abort(new Error("client gone"));
    const one = await waits[0].then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(one).toBeInstanceOf(PrepareError);
    expect((one as PrepareError).result.error.code).toBe("ERR_ABORTED");
    expect((one as PrepareError).result.error.message).toMatch(/client gone/);
    // The other caller still waits for it: it stays queued.
    expect(sandbox.stats().queueDepth).toBe(1);
    second.abort();
    await expect(waits[1]).rejects.toMatchObject({ code: "ERR_ABORTED" });
    expect(sandbox.stats().queueDepth).toBe(0);
    release();
    expect(completed((await blocker) as never).value).toBe("done");
    // The slot went to nobody: the dropped module never ran.
    await new Promise((r) => setTimeout(r, 50));
    expect(evaluations).toBe(0);
    // The same code again is a fresh preparation, not the dropped one's failure.
    const prefix = await sandbox.prepare({ code, globals, limits });
    expect(evaluations).toBe(1);
    await prefix.dispose();
  }, 30_000);

  it("a caller without a signal keeps a queued preparation another caller abandoned", async () => {
    evaluations = 0;
    const { blocker } = await slotTaken();
    const code = `await evaluated(); export const n = ${Math.random()};`;
    const leaving = new AbortController();
    const left = sandbox.prepare({ code, globals, signal: leaving.signal, limits });
    const staying = sandbox.prepare({ code, globals, limits });
    await until(() => sandbox.stats().queueDepth === 1);
    leaving.abort();
    await expect(left).rejects.toBeInstanceOf(PrepareError);
    release();
    await blocker;
    const prefix = await staying;
    expect(prefix.exports.n).toEqual(expect.any(Number));
    expect(evaluations).toBe(1);
    await prefix.dispose();
  }, 30_000);

  it("an evaluation under way runs on for whoever asks next, and is disposed when nobody does", async () => {
    evaluations = 0;
    hold();
    const code = `await evaluated(); await held(); export const n = ${Math.random()};`;
    const leaving = new AbortController();
    const left = sandbox.prepare({ code, globals, signal: leaving.signal, limits });
    await until(() => evaluations === 1);
    const started = performance.now();
    leaving.abort();
    await expect(left).rejects.toMatchObject({ code: "ERR_ABORTED" });
    expect(performance.now() - started).toBeLessThan(1000);
    // Asked for again while it still evaluates: the same evaluation.
    const joined = sandbox.prepare({ code, globals, limits });
    release();
    const prefix = await joined;
    expect(evaluations).toBe(1);
    await prefix.dispose();

    // Nobody asks again: finished, it is disposed (a one-off run brings the process and remote
    // hosts' stats up to date).
    hold();
    const lone = `await evaluated(); await held(); export const n = ${Math.random()};`;
    const alone = new AbortController();
    const abandoned = sandbox.prepare({ code: lone, globals, signal: alone.signal, limits });
    await until(() => evaluations === 2);
    alone.abort();
    await expect(abandoned).rejects.toMatchObject({ code: "ERR_ABORTED" });
    release();
    await until(() => sandbox.stats().activeRuns === 0);
    await new Promise((r) => setTimeout(r, 50));
    completed(await sandbox.run({ code: "export default 1" }));
    expect(sandbox.stats().prefixes).toEqual([]);
  }, 30_000);

  it("an already aborted signal refuses at once, and a signal that is no AbortSignal is a TypeError", async () => {
    evaluations = 0;
    const code = `await evaluated(); export const n = ${Math.random()};`;
    await expect(sandbox.prepare({ code, globals, signal: AbortSignal.abort(), limits })).rejects.toMatchObject({
      code: "ERR_ABORTED",
    });
    await expect(sandbox.prepare({ code, globals, signal: {} as AbortSignal })).rejects.toThrow(TypeError);
    await new Promise((r) => setTimeout(r, 50));
    expect(evaluations).toBe(0);
  });
});
