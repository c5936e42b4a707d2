import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, describe, expect, it } from "vitest";
import { normalizeSource } from "../../src/core/source.js";
import { compactGuestRuntimeScript } from "../../src/engines/guest/compact-runtime.js";
import { createSandbox, type Sandbox } from "../../src/index.js";
import { SECRET, startExecutor } from "../executor/helpers.js";
import { esbuildServices } from "../helpers/processes.js";

/**
 * esbuild's cost is not linear in the text: every duplicate declaration is an error, and the
 * errors cost it quadratic time (10,000 took 4 s here, 40,000 more than a minute) under every
 * size cap. A compile is bounded by the run's wall time; past it esbuild's service is stopped.
 */
const costly = (declarations: number, tag = "") => `${tag}\n${"let a;\n".repeat(declarations)}`;

/**
 * CPU ticks (1/100 s) the esbuild processes started by this test process used in `ms`, after
 * 300 ms for a stop to land: it crosses to esbuild's client process, and in CI (load ~5) 30 ticks
 * were counted in the second after the abandoned compiles once. Past 20, it says which process.
 */
async function esbuildTicks(ms: number): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 300));
  const before = new Map(esbuildServices().map((each) => [each.pid, each.ticks]));
  await new Promise((resolve) => setTimeout(resolve, ms));
  const after = esbuildServices();
  const used = after.map((each) => ({ ...each, used: each.ticks - (before.get(each.pid) ?? 0), new: !before.has(each.pid) }));
  const total = used.reduce((sum, each) => sum + each.used, 0);
  if (total >= 20) console.error("esbuild's CPU after the compiles ended:", JSON.stringify(used));
  return total;
}

describe("a compile is bounded in time", () => {
  const sandboxes: Sandbox[] = [];
  afterAll(async () => {
    await Promise.all(sandboxes.map((s) => s.dispose()));
  });

  // First in this file: cordon's own runtime is minified once per process, for the first QuickJS instance.
  it("cordon's own compiles are not lost when a guest's compile is abandoned beside them", async () => {
    const runtime = compactGuestRuntimeScript();
    await expect(normalizeSource(costly(40_000, "// beside"), "slow.ts", { timeoutMs: 10 })).rejects.toMatchObject({
      code: "ERR_COMPILE",
    });
    // It waited for ever (its service was stopped under it), and so did every QuickJS sandbox after it.
    const answer = await Promise.race([runtime, new Promise((resolve) => setTimeout(() => resolve("still waiting"), 10_000))]);
    expect(typeof answer === "string" && answer.startsWith("(function(){")).toBe(true);
  });

  it("past its bound a compile fails with ERR_COMPILE and esbuild stops working on it", async () => {
    const started = performance.now();
    await expect(normalizeSource(costly(40_000, "// one"), "slow.ts", { timeoutMs: 500 })).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/^slow\.ts: compiling the module took longer than 500 ms/),
    });
    expect(performance.now() - started).toBeLessThan(5_000);
    // The transform ran for a minute when nothing stopped it.
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
    // The next compile gets a new service.
    expect((await normalizeSource("export default 1 as number;", "next.ts")).code).toContain("export");
  });

  it("a compile in flight beside an abandoned one finishes with its own outcome", async () => {
    const innocent = normalizeSource(costly(6_000, "// innocent"), "innocent.ts", { timeoutMs: 60_000 });
    const plain = normalizeSource("export const x: number = 2;", "plain.ts", { timeoutMs: 60_000 });
    await expect(normalizeSource(costly(40_000, "// two"), "slow.ts", { timeoutMs: 300 })).rejects.toMatchObject({
      code: "ERR_COMPILE",
    });
    // Its own text's errors, not "the service was stopped", and not a wait for ever.
    await expect(innocent).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/innocent\.ts:\d+:\d+: The symbol "a" has already been declared/),
    });
    expect((await plain).code).toContain("x = 2");
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
  });

  it("compiles abandoned again and again do not starve another tenant's", async () => {
    // Each abandoned compile used to stop the one service, and every compile on it started over:
    // one taking 150 ms more than the attacker's period never finished.
    const started = performance.now();
    const innocent = normalizeSource(costly(6_000, "// victim"), "victim.ts", { timeoutMs: 10_000 });
    let outcome: unknown;
    innocent.then(
      () => {},
      (error) => {
        outcome = error;
      },
    );
    // The attack outlasts the victim's bound: starved, it would time out (ERR_COMPILE, "took longer").
    for (let i = 0; outcome === undefined && performance.now() - started < 11_000; i++) {
      await normalizeSource(costly(40_000, `// attack ${i}`), "attack.ts", { timeoutMs: 100 }).catch(() => {});
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await expect(innocent).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/victim\.ts:\d+:\d+: The symbol "a" has already been declared/),
    });
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
  });

  it("abandoned compiles cost no memory that stays: 300 of them leave the heap where it was", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const abandon = async (i: number) => {
      const controller = new AbortController();
      const compile = normalizeSource(`export const n${i}: number = ${i};`, "abandoned.ts", {
        timeoutMs: 60_000,
        signals: [controller.signal],
      });
      controller.abort();
      await compile.catch(() => {});
    };
    for (let i = 0; i < 20; i++) await abandon(i);
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 20; i < 320; i++) await abandon(i);
    gc();
    gc();
    // Each abandoned compile's service kept a copy of esbuild's module (~165 KB): 50 MB for these.
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(10 * 1024 * 1024);
    expect((await normalizeSource("export const after: number = 1;", "after.ts")).code).toContain("after = 1");
    expect(await esbuildTicks(500)).toBeLessThan(20);
  });

  it("an abort ends a compile with ERR_ABORTED", async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 200);
    const started = performance.now();
    await expect(
      normalizeSource(costly(40_000, "// three"), "aborted.ts", { timeoutMs: 60_000, signals: [controller.signal] }),
    ).rejects.toMatchObject({ code: "ERR_ABORTED" });
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
  });

  it("a run's compile gets its wall time", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    sandboxes.push(sandbox);
    const started = performance.now();
    const main = await sandbox.run({ code: costly(40_000, "// main"), limits: { wallTimeMs: 1_000 } });
    expect(performance.now() - started).toBeLessThan(6_000);
    expect(main.ok).toBe(false);
    if (!main.ok) {
      expect(main.error.code).toBe("ERR_COMPILE");
      expect(main.error.name).toBe("TimeoutError");
      expect(main.error.message).toMatch(/took longer than 1000 ms \(the run's wall time/);
    }
  });

  // Source imports are compiled by each engine's instance (v8 while linking, quickjs before its
  // worker thread evaluates): each gets the run's bound.
  it.each(["v8", "quickjs"] as const)("a source import's compile gets the run's wall time (%s, in-process)", async (engine) => {
    const sandbox = await createSandbox({ engine, host: "inprocess" });
    sandboxes.push(sandbox);
    const started = performance.now();
    const imported = await sandbox.run({
      code: `import "./slow.js"; export default 1;`,
      imports: { "./slow.js": costly(40_000, `// import ${engine}`) },
      limits: { wallTimeMs: 1_000 },
    });
    expect(performance.now() - started).toBeLessThan(6_000);
    // The run's wall timer and the compile's bound are the same length: either may report first,
    // and both name it a compile past its time (the wall timer named it ERR_WALL_TIMEOUT, as if
    // the guest had run, before).
    expect(imported.ok ? "completed" : imported.error).toMatchObject({
      code: "ERR_COMPILE",
      name: "TimeoutError",
      message: expect.stringMatching(/took longer than (1000 ms|the run's wall time of 1000 ms)/),
    });
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
    const after = await sandbox.run({ code: "export default 40 + 2;" });
    expect(after.ok && after.value).toBe(42);
  });

  it("a prefix's compile holds a run slot, as its evaluation does", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess", maxConcurrentRuns: 1, maxQueuedRuns: 0 });
    sandboxes.push(sandbox);
    const prepared = sandbox.prepare({ code: costly(40_000, "// prepare"), limits: { wallTimeMs: 1_000 } });
    await new Promise((resolve) => setTimeout(resolve, 200));
    // The only slot is the compile's: a run now is refused, not run beside it.
    const refused = await sandbox.run({ code: "export default 1" });
    expect(refused.ok ? "ran" : refused.error.code).toBe("ERR_QUEUE_FULL");
    await expect(prepared).rejects.toMatchObject({ result: { error: { code: "ERR_COMPILE", name: "TimeoutError" } } });
    const after = await sandbox.run({ code: "export default 2" });
    expect(after.ok && after.value).toBe(2);
  });

  it("an aborted run ends its compile", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    sandboxes.push(sandbox);
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("client went away")), 200);
    const result = await sandbox.run({
      code: costly(40_000, "// abort run"),
      limits: { wallTimeMs: 30_000 },
      signal: controller.signal,
    });
    // As an abort while running reports it: the caller's reason.
    expect(result).toMatchObject({
      status: "aborted",
      reason: "client went away",
      error: { code: "ERR_ABORTED", name: "AbortError", message: "the run was aborted: client went away" },
    });
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
  });

  it("dispose ends a source import's compile too (v8, in-process)", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    const run = sandbox.run({
      code: `import "./slow.js"; export default 1;`,
      imports: { "./slow.js": costly(40_000, "// import dispose") },
      limits: { wallTimeMs: 30_000 },
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await sandbox.dispose();
    const result = await run;
    expect(result.ok ? "ran" : result.error.code).toBe("ERR_INSTANCE_RESET");
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
  });

  it("many compiles at once hold no more listeners than they need (no leak warning)", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess", maxConcurrentRuns: 40 });
    sandboxes.push(sandbox);
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on("warning", onWarning);
    try {
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => sandbox.run({ code: `export default ${i} as number;` })),
      );
      expect(results.every((r) => r.ok)).toBe(true);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).not.toContain("MaxListenersExceededWarning");
    } finally {
      process.off("warning", onWarning);
    }
  });

  it("dispose ends a compile in progress: the run ends with ERR_INSTANCE_RESET", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    const run = sandbox.run({ code: costly(40_000, "// dispose"), limits: { wallTimeMs: 30_000 } });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const started = performance.now();
    await sandbox.dispose();
    const result = await run;
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.error.code).toBe("ERR_INSTANCE_RESET");
      expect(result.error.message).toMatch(/disposed while the module was compiling/);
    }
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
  });

  it("the service shuts down within its grace while a costly module is still compiling", async () => {
    const t = await startExecutor();
    // A wall time of 30 s bounds this compile at 30 s: the shutdown must not wait for it.
    const response = fetch(`${t.url}/run`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${SECRET}` },
      body: JSON.stringify({ code: costly(40_000, "// serve"), limits: { wallTimeMs: 30_000 } }),
    }).then(
      (r) => r.status,
      () => "closed",
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    const started = performance.now();
    await t.executor.close({ graceMs: 200 });
    expect(performance.now() - started).toBeLessThan(5_000);
    await response;
    expect(await esbuildTicks(1_000)).toBeLessThan(20);
  });
});
