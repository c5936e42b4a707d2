import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { completed } from "../conformance/results.js";
import { descendants, until, workerPids } from "../helpers/processes.js";

/**
 * A process-host worker compiles only the source imports a run brings (the host compiles the
 * module). It runs no esbuild until the sandbox has seen such a run (each one cost a client
 * thread, a 13 MB service process and ~160 ms of CPU); workers started after one have it ready, so their
 * first such run does not wait for its start in its wall time (~100 ms).
 */
describe("esbuild in process-host workers", () => {
  const esbuildUnder = (pid: number) => descendants(pid).some((each) => each.comm === "esbuild");
  const importing = (n: number) => ({
    code: `import { f } from "./lib.js"; export default () => f(${n})`,
    imports: { "./lib.js": `export const f = (x) => x + ${n}` },
  });

  it.each(["v8", "quickjs"] as const)(
    "%s: none in a worker until a run brings source imports; ready in the workers after",
    async (engine) => {
      await using sandbox = await createSandbox({ engine, host: "process", workers: { maxRunsPerWorker: 2 } });
      expect(completed(await sandbox.run({ code: "export default 1" })).value).toBe(1);
      const [first] = workerPids(sandbox);
      // Its spares are made (their warm-up modules read from the build): still no esbuild.
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(esbuildUnder(first)).toBe(false);
      // Its second run, with an import: it compiles it (esbuild starts there, now), then retires.
      expect(completed(await sandbox.run(importing(1))).value).toBe(2);
      expect(esbuildUnder(first)).toBe(true);
      // The next run takes a new worker, started with esbuild's service: up before it compiles anything.
      expect(completed(await sandbox.run({ code: "export default 3" })).value).toBe(3);
      const second = workerPids(sandbox).find((pid) => pid !== first) as number;
      expect(second).toBeGreaterThan(0);
      await until(() => esbuildUnder(second), 10_000);
      expect(completed(await sandbox.run(importing(4))).value).toBe(8);
    },
    60_000,
  );

  // why (red team): any source text in `imports` set it, though a module importing nothing never
  // loads it (nor a source that does not parse): one such request made every later worker, every
  // tenant's, start esbuild.
  it("imports beside a module that imports nothing start none in later workers", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", workers: { maxRunsPerWorker: 2 } });
    const unused = { code: "export default () => 1", imports: { "./lib.js": "export const = ;" } };
    expect(completed(await sandbox.run({ code: "export default 0" })).value).toBe(0);
    const [first] = workerPids(sandbox);
    // Its second run: the worker retires after it, and the next run takes one started after it.
    expect(completed(await sandbox.run(unused)).value).toBe(1);
    expect(completed(await sandbox.run({ code: "export default 2" })).value).toBe(2);
    const second = workerPids(sandbox).find((pid) => pid !== first) as number;
    expect(second).toBeGreaterThan(0);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(esbuildUnder(second)).toBe(false);
  }, 60_000);
});
