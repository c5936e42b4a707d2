import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { HOST_DIR_PREFIX, sweepStaleHostDirs } from "../../src/engines/deno/host-dirs.js";
import { createSandbox } from "../../src/index.js";
import { completed, failed } from "../conformance/results.js";
import { alive, descendants, until } from "../helpers/processes.js";

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
    // Processes under this one whose command is deno (spares and runs' fresh processes), not
    // zombies: children of the spawner process once it runs (core/spawner.ts), of this one before.
    const denoChildren = () =>
      descendants()
        .filter((each) => each.comm === "deno" && each.state !== "Z")
        .map((each) => each.pid);
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

/** Starts a host process that runs one guest (fixtures/deno-leftover-host.mjs); resolves to it and the guest's directory. */
async function leftoverHost(mode: "exit" | "wait") {
  const fixture = fileURLToPath(new URL("../fixtures/deno-leftover-host.mjs", import.meta.url));
  const host = spawn(process.execPath, ["--no-node-snapshot", fixture, mode], { stdio: ["pipe", "pipe", "inherit"] });
  const [line] = (await once(host.stdout!, "data")) as [Buffer];
  const dir = line.toString().trim();
  expect(existsSync(join(dir, "tenant-secret.txt")), dir).toBe(true);
  // Told to exit only now: a host that exited as soon as it printed removed the directory before
  // this look at CI's load (~4), and the test failed on its own race.
  if (mode === "exit") host.stdin!.write("exit\n");
  return { host, dir };
}

/** What a host leaves on disk when it ends without dispose(): found by review, 138 private directories of dead hosts. */
describe("deno: the private directories of a host that ended", () => {
  it("a host that exits without dispose() removes its Deno processes' directories", async () => {
    const { host, dir } = await leftoverHost("exit");
    await once(host, "exit");
    expect(existsSync(dir)).toBe(false);
    expect(existsSync(dirname(dirname(dir)))).toBe(false);
  }, 30_000);

  it("a killed host's directories are swept by the next host; a live host's, this one's and an unowned new one stay", async () => {
    const killed = await leftoverHost("wait");
    const living = await leftoverHost("wait").catch((error) => {
      killed.host.kill("SIGKILL");
      throw error;
    });
    // A pid that lives, with another start time: a reused pid, its maker long gone.
    const reused = mkdtempSync(join(tmpdir(), HOST_DIR_PREFIX));
    const boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    writeFileSync(join(reused, "owner"), JSON.stringify({ pid: process.pid, start: "1", boot }));
    // No owner yet (its maker is between making it and writing it).
    const unowned = mkdtempSync(join(tmpdir(), HOST_DIR_PREFIX));
    try {
      await using sandbox = await createSandbox({ engine: "deno", spareInstances: 0 });
      const own = completed(await sandbox.run({ code: "export default () => Deno.cwd()" })).value as string;
      killed.host.kill("SIGKILL");
      await once(killed.host, "exit");
      // Its Deno process may have removed its own private directory (it read its stdin closed
      // before the kernel's SIGKILL came); the host's directory stays.
      const killedHostDir = dirname(dirname(killed.dir));
      expect(existsSync(killedHostDir)).toBe(true);
      await sweepStaleHostDirs();
      expect(existsSync(killedHostDir)).toBe(false);
      expect(existsSync(reused)).toBe(false);
      expect(existsSync(living.dir)).toBe(true);
      expect(existsSync(own)).toBe(true);
      expect(existsSync(unowned)).toBe(true);
      expect(completed(await sandbox.run({ code: "export default () => Deno.cwd()" })).value).toBe(own);
    } finally {
      killed.host.kill("SIGKILL");
      living.host.kill("SIGKILL");
      rmSync(unowned, { recursive: true, force: true });
      rmSync(reused, { recursive: true, force: true });
    }
  }, 30_000);
});
