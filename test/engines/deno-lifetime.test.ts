import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { completed, failed } from "../conformance/results.js";
import { alive, until } from "../helpers/processes.js";

/**
 * What a Deno guest leaves running: worker threads count against its CPU limit, a process that
 * keeps working after its run ended is ended, and no Deno process outlives its host.
 */
describe("deno: work the guest leaves running", () => {
  it("CPU of node:worker_threads workers counts against cpuTimeMs", async () => {
    await using sandbox = await createSandbox({ engine: "deno" });
    const result = await sandbox.run({
      code: `import { Worker } from "node:worker_threads";
        export default async () => {
          for (let i = 0; i < 2; i++) new Worker("for (;;) {}", { eval: true });
          await new Promise((r) => setTimeout(r, 3000));
          return "slept";
        }`,
      limits: { cpuTimeMs: 300, wallTimeMs: 8000 },
    });
    expect(failed(result).error.code).toBe("ERR_CPU_TIMEOUT");
  }, 20_000);

  it("a process still spinning after its run returned is ended", async () => {
    await using sandbox = await createSandbox({ engine: "deno" });
    const result = await sandbox.run({
      code: `import { setTimeout as later } from "node:timers";
        export default () => { later(() => { for (;;) {} }, 100); return Deno.pid; }`,
    });
    const pid = completed(result).value as number;
    await until(() => !alive(pid), 5000);
    // The next run is served (by another process).
    expect(completed(await sandbox.run({ code: "export default () => 2" })).value).toBe(2);
  }, 20_000);

  it("replacing typed-array methods does not stop the bootstrap's frames (the run ends at once)", async () => {
    await using sandbox = await createSandbox({ engine: "deno" });
    const started = performance.now();
    const result = await sandbox.run({
      code: `Uint8Array.prototype.subarray = () => new Uint8Array(0);
        Uint8Array.prototype.set = () => {};
        DataView.prototype.setUint32 = () => {};
        Object.defineProperty(Object.getPrototypeOf(Uint8Array.prototype), "length", { get: () => 0 });
        export default () => { console.log("still framed"); return 7 }`,
      limits: { wallTimeMs: 5000 },
    });
    expect(completed(result).value).toBe(7);
    expect(result.logs.map((l) => l.message)).toEqual(["still framed"]);
    expect(performance.now() - started).toBeLessThan(4000);
  }, 20_000);

  it("dispose() ends processes still starting too: none is left when it resolves", async () => {
    // Children of this process whose command is deno (spares and runs' fresh processes).
    const denoChildren = () =>
      readFileSync(`/proc/${process.pid}/task/${process.pid}/children`, "utf8")
        .trim()
        .split(/\s+/)
        .filter((pid) => {
          try {
            const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
            return stat.includes("(deno)") && !/\) Z /.test(stat);
          } catch {
            return false;
          }
        });
    for (const delayMs of [60, 120]) {
      const sandbox = await createSandbox({ engine: "deno", spareInstances: 2 });
      const runs = Array.from({ length: 3 }, (_, i) =>
        sandbox.run({ code: `export default () => { for (;;) {} } // ${delayMs}.${i}`, limits: { cpuTimeMs: 5000 } }),
      );
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      await sandbox.dispose();
      expect(denoChildren(), `dispose after ${delayMs} ms`).toEqual([]);
      await Promise.all(runs);
    }
  });

  it("no Deno process outlives its host process, even one whose guest spins", async () => {
    const host = spawn(
      process.execPath,
      ["--no-node-snapshot", fileURLToPath(new URL("../fixtures/deno-orphan-host.mjs", import.meta.url))],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    const [line] = (await once(host.stdout!, "data")) as [Buffer];
    const pid = Number(line.toString().trim());
    expect(pid).toBeGreaterThan(0);
    expect(alive(pid)).toBe(true);
    host.kill("SIGKILL");
    await until(() => !alive(pid), 5000);
  }, 30_000);
});
