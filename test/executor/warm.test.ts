import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "../helpers/processes.js";
import { startExecutor, type TestExecutor } from "./helpers.js";

describe("warm reuse: a module is prepared once and its default export called per request", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor({ warmModules: 2 });
  });
  afterAll(() => t.executor.close());

  const double = { code: "export default (i) => i * 2", filename: "double.js" };

  it("the first run is cold, the second identical one is warm", async () => {
    const first = await t.runResult({ ...double, input: 1 });
    const second = await t.runResult({ ...double, input: 1 });
    expect(first).toMatchObject({ status: "completed", value: 2, stats: { warm: false } });
    expect(second).toMatchObject({ status: "completed", value: 2, stats: { warm: true } });
    // why: warm is per module, not per request — another input reuses the same instances.
    expect(await t.runResult({ ...double, input: 5 })).toMatchObject({ value: 10, stats: { warm: true } });
  });

  it("another filename or other imports make another module", async () => {
    expect(await t.runResult({ ...double, filename: "other.js", input: 1 })).toMatchObject({ stats: { warm: false } });
    const withImports = { ...double, imports: { unused: "export default 0" }, input: 1 };
    expect(await t.runResult(withImports)).toMatchObject({ value: 2, stats: { warm: false } });
  });

  it("different partition keys never share a warm module or its state", async () => {
    const counter = { code: "let n = 0; export default () => ++n", filename: "counter.js" };
    expect(await t.runResult({ ...counter, partitionKey: "tenant-a" })).toMatchObject({ value: 1 });
    expect(await t.runResult({ ...counter, partitionKey: "tenant-a" })).toMatchObject({ value: 2, stats: { warm: true } });
    expect(await t.runResult({ ...counter, partitionKey: "tenant-b" })).toMatchObject({ value: 1, stats: { warm: false } });
  });

  it("keeps at most warmModules prepared modules, least recently used out first", async () => {
    // Now warm: other.js and the one with imports (double.js was evicted by them).
    expect(await t.runResult({ ...double, input: 1 })).toMatchObject({ stats: { warm: false } });
    // why: an evicted module's warm instances are released (the host may still list it, with none).
    // Polled for, up to 5 s (a fixed 100 ms was a guess at a loaded machine's pace).
    const holding = () => t.executor.sandbox.stats().prefixes.filter((prefix) => prefix.warm > 0);
    await until(() => holding().length <= 2, 5000);
    expect(holding().length).toBeLessThanOrEqual(2);
  });

  it("call names an export: warm like the default, this bound, a missing one named", async () => {
    const code = "export default 'not a function'; export const handlers = { p: 'h:', on(e) { return this.p + e.id } }";
    const on = { code, filename: "handlers.js", call: { export: "handlers.on", args: [{ id: 7 }] } };
    expect(await t.runResult(on)).toMatchObject({ status: "completed", value: "h:7", stats: { warm: false } });
    expect(await t.runResult(on)).toMatchObject({ status: "completed", value: "h:7", stats: { warm: true } });
    const missing = await t.runResult({ code, filename: "handlers.js", call: { export: "handlers.off" } });
    expect(missing).toMatchObject({ status: "failed", error: { code: "ERR_CALL_TARGET_NOT_FOUND" } });
    // why: a default that is no function runs as a value, and the module stays warm for calls.
    expect(await t.runResult({ code, filename: "handlers.js" })).toMatchObject({ value: "not a function" });
    expect(await t.runResult(on)).toMatchObject({ value: "h:7", stats: { warm: true } });
  });

  it("a module that failed to prepare is not remembered: the next request prepares it again", async () => {
    // why: the first request's own wall time is the evaluation's budget; the second has more.
    const code = "const end = Date.now() + 150; while (Date.now() < end) {} export default () => 'ready'";
    const tight = await t.runResult({ code, limits: { wallTimeMs: 50 } });
    expect(tight.ok).toBe(false);
    if (!tight.ok) expect(tight.error.code).toMatch(/^ERR_(CPU|WALL)_TIMEOUT$/);
    expect(await t.runResult({ code })).toMatchObject({ status: "completed", value: "ready" });
  });
});

describe("requests that arrive while their module is being prepared (they share that preparation)", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor();
  });
  afterAll(() => t.executor.close({ graceMs: 0 }));

  /** A module whose evaluation spins for `ms`: unique per test, so each starts cold. */
  const slowModule = (ms: number) =>
    `// ${Math.random()}\nconst t = Date.now(); while (Date.now() - t < ${ms}) {}\nexport default () => "ok";`;

  it("one whose wall time the shared preparation's limit cut prepares again, to its own", async () => {
    const code = slowModule(400);
    const first = t.runResult({ code, limits: { wallTimeMs: 100 } });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const second = t.runResult({ code, limits: { wallTimeMs: 10_000 } });
    expect(await first).toMatchObject({ ok: false, error: { code: "ERR_WALL_TIMEOUT" } });
    // It failed with the first request's 100 ms.
    expect(await second).toMatchObject({ ok: true, value: "ok" });
  }, 30_000);

  it("one waits no longer than its own wall time, and reports its own wall time", async () => {
    const code = slowModule(1_500);
    const first = t.runResult({ code, limits: { wallTimeMs: 10_000 } });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const started = performance.now();
    const second = await t.runResult({ code, limits: { wallTimeMs: 200 } });
    // It "completed" after 3.3 s, reporting wallMs 1.9.
    expect(second).toMatchObject({ ok: false, error: { code: "ERR_WALL_TIMEOUT", message: expect.stringContaining("200 ms") } });
    expect(performance.now() - started).toBeLessThan(1_300);
    expect(second.stats.wallMs).toBeGreaterThanOrEqual(190);
    const third = t.runResult({ code, limits: { wallTimeMs: 10_000 } });
    expect(await first).toMatchObject({ ok: true, stats: { warm: false } });
    // A request that waited (for what remained of the preparation) reports the wait as its own.
    const waited = await third;
    expect(waited).toMatchObject({ ok: true, stats: { warm: false } });
    expect(waited.stats.wallMs).toBeGreaterThan(100);
  }, 30_000);
});

describe("preparations whose clients left", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor({ sandbox: { engine: "v8", host: "process", maxConcurrentRuns: 1 } });
  });
  afterAll(() => t.executor.close());

  /** A module whose top level holds its run slot for `ms` without spinning. */
  const sleeper = (ms: number, tag: string) =>
    `/* ${tag} */ await new Promise((r) => setTimeout(r, ${ms})); export default () => "${tag}"`;
  const load = async () =>
    ((await (await fetch(`${t.url}/health`)).json()) as { load: { activeRuns: number; queueDepth: number } }).load;

  it("are dropped while queued; one evaluating still counts in /health until it ends", async () => {
    // Red team, 2026-12-05: 32 clients each sent a slow module and closed at once; every module
    // was still prepared, one slot after another, and /health read activeRuns 0 meanwhile.
    const gone = new AbortController();
    const requests = ["first", "second", "third", "fourth"].map((tag) =>
      t.run({ code: sleeper(1500, tag), limits: { wallTimeMs: 20_000 } }, {}, gone.signal).catch(() => undefined),
    );
    await until(async () => (await load()).queueDepth === 3);
    gone.abort();
    await Promise.all(requests);
    // The first evaluates on (its slot held, no request left to answer); the three queued are gone.
    await until(async () => (await load()).queueDepth === 0);
    expect(await load()).toEqual({ activeRuns: 1, queueDepth: 0 });
    const started = performance.now();
    expect(await t.runResult({ code: "export default 42" })).toMatchObject({ ok: true, value: 42 });
    // It waited for the first one's 1.5 s, not for three more after it (6 s).
    expect(performance.now() - started).toBeLessThan(4_000);
    await until(async () => (await load()).activeRuns === 0);
  }, 30_000);

  it("one a request still waits for is prepared for it, and then warm", async () => {
    const code = sleeper(300, "shared");
    const gone = new AbortController();
    const leaving = t.run({ code }, {}, gone.signal).catch(() => undefined);
    const staying = t.runResult({ code });
    await new Promise((r) => setTimeout(r, 50));
    gone.abort();
    await leaving;
    expect(await staying).toMatchObject({ ok: true, value: "shared", stats: { warm: false } });
    expect(await t.runResult({ code })).toMatchObject({ ok: true, value: "shared", stats: { warm: true } });
  }, 30_000);
});

describe("the deno engine behind the executor", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor({ sandbox: { engine: "deno", host: "inprocess" } });
  });
  afterAll(() => t.executor.close());

  it("a module whose default is not a function runs in a process of its partition's own", async () => {
    // Such a module runs with sandbox.run, which knows no partition: the deno engine kept the
    // first tenant's process for the second (same code), which read the file the first wrote.
    const code = `let seen = null;
      try { seen = Deno.readTextFileSync("./note"); } catch {}
      Deno.writeTextFileSync("./note", "a run was here");
      export default seen;`;
    const first = await t.runResult({ code, partitionKey: "tenant-a" });
    expect(first).toMatchObject({ status: "completed", value: null });
    // The same tenant's next run is its function's process: it sees what the first left.
    expect(await t.runResult({ code, partitionKey: "tenant-a" })).toMatchObject({ status: "completed", stats: { warm: true } });
    expect(await t.runResult({ code, partitionKey: "tenant-b" })).toMatchObject({ status: "completed", value: null });
  });
});
