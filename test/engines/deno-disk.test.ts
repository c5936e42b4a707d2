import { closeSync, linkSync, mkdirSync, mkdtempSync, openSync, rmSync, unlinkSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { DiskWatch, MAX_DISK_ENTRIES, measureDeletedOpenFiles, measureDir } from "../../src/engines/deno/disk-watch.js";
import { completed, failed } from "../conformance/results.js";

const functionProcesses = (sandbox: Sandbox): number =>
  (sandbox.stats().workers ?? []).filter((w) => w.partition.startsWith("function:")).length;

/** A Deno guest may write only its private directory; these pin that what it writes there is bounded. */
describe("the deno engine's disk limit", () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ engine: "deno", spareInstances: 0, deno: { diskMb: 8 } });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });
  const long = { wallTimeMs: 20_000, cpuTimeMs: 20_000 };

  it("one file written past the limit is ERR_MEMORY_LIMIT naming the disk; the next run succeeds", async () => {
    const code = `export default () => {
      const file = Deno.openSync("big", { write: true, create: true });
      const chunk = new Uint8Array(1 << 20).fill(1);
      for (let i = 0; i < 4096; i++) file.writeSync(chunk);
      return "wrote 4 GB";
    }`;
    const result = failed(await sandbox.run({ code, limits: long }));
    expect(result.error.code).toBe("ERR_MEMORY_LIMIT");
    expect(result.error.message).toMatch(/disk limit of 8 MB .*private directory holds more than 8 MB/);
    expect(completed(await sandbox.run({ code: "export default 1" })).value).toBe(1);
  });

  it("copies count (copy_file_range writes no bytes through the process)", async () => {
    const code = `export default () => {
      Deno.writeFileSync("a", new Uint8Array(2 << 20).fill(1));
      for (let i = 0; i < 1000; i++) Deno.copyFileSync("a", "copy" + i);
      return "copied 2 GB";
    }`;
    expect(failed(await sandbox.run({ code, limits: long })).error.code).toBe("ERR_MEMORY_LIMIT");
  });

  it("directories count: each costs blocks though nothing is written into it", async () => {
    const code = `export default () => { for (let i = 0; i < 100000; i++) Deno.mkdirSync("d" + i); return "made" }`;
    const result = failed(await sandbox.run({ code, limits: long }));
    expect(result.error.code).toBe("ERR_MEMORY_LIMIT");
    expect(result.error.message).toMatch(/disk limit/);
  });

  it("what a function's earlier runs left counts for its later runs; its process then ends", async () => {
    await using sandbox = await createSandbox({ engine: "deno", spareInstances: 0, deno: { diskMb: 8 } });
    // One function (same code), one process: 3 MB a run, 8 MB allowed. Each run lists the parts it sees.
    const code = `export default (input) => {
      Deno.writeFileSync("part" + input, new Uint8Array(3 << 20).fill(1));
      return [...Deno.readDirSync(".")].filter((e) => e.name.startsWith("part")).length;
    }`;
    expect(completed(await sandbox.run({ code, input: 1 })).value).toBe(1);
    expect(completed(await sandbox.run({ code, input: 2 })).value).toBe(2);
    // The third write succeeds; the watchdog finds the directory over its limit during the run
    // or right after it, and ends the process.
    const third = await sandbox.run({ code, input: 3 });
    if (third.ok) expect(third.value).toBe(3);
    else expect(third.error.code).toBe("ERR_MEMORY_LIMIT");
    const deadline = Date.now() + 10_000;
    while (functionProcesses(sandbox) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(functionProcesses(sandbox)).toBe(0);
    // A new process, a new directory: only this run's part.
    expect(completed(await sandbox.run({ code, input: 4 })).value).toBe(1);
  });

  // Found by review: the walk lists names, and a deleted file has none; the guest held +600 MB
  // under a 16 MB limit until its process ended.
  it.each([
    ["a file it deleted", `Deno.removeSync("held")`],
    ["a file in the directory it removed", `Deno.removeSync(Deno.cwd(), { recursive: true })`],
  ])("%s but keeps open counts", async (_name, remove) => {
    const code = `export default async () => {
      const file = Deno.openSync("held", { write: true, create: true });
      ${remove};
      const chunk = new Uint8Array(1 << 20).fill(1);
      for (let i = 0; i < 64; i++) file.writeSync(chunk);
      globalThis.held = file;
      await new Promise((resolve) => setTimeout(resolve, 1500));
      return "holds 64 MB";
    }`;
    const result = failed(await sandbox.run({ code, limits: long }));
    expect(result.error.code).toBe("ERR_MEMORY_LIMIT");
    expect(result.error.message).toMatch(/disk limit of 8 MB .*files it deleted but keeps open hold more than 8 MB/);
  });

  // Found by review: Deno cached what each guest module compiled to in the shared DENO_DIR, keyed
  // by the module's URL (new in every process), never read back or removed: 0 -> 194 MB in 4 runs.
  it("what Deno caches of the modules a guest writes and imports is bounded in its process, never in the shared cache", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "cordon-test-denocache-"));
    try {
      await using own = await createSandbox({ engine: "deno", spareInstances: 0, deno: { cacheDir, diskMb: 8 } });
      // Deno's cache of them has a bound of its own: MIN_CACHE_BYTES (64 MB).
      const code = `export default async () => {
        for (let n = 0; n < 200; n++) {
          Deno.writeTextFileSync("m" + n + ".js", "export const s = " + JSON.stringify(n + "x".repeat(1 << 20)) + ";");
          await import("./m" + n + ".js");
          Deno.removeSync("m" + n + ".js");
        }
        return "imported 200 modules of 1 MB";
      }`;
      const result = failed(await own.run({ code, limits: { ...long, memoryMb: 512 } }));
      expect(result.error.code).toBe("ERR_MEMORY_LIMIT");
      expect(result.error.message).toMatch(/disk limit of 8 MB .*Deno's cache of its modules holds more than 64 MB/);
      expect((await measureDir(cacheDir, 2 ** 40, 100_000)).bytes).toBeLessThan(1 << 20);
      expect(completed(await own.run({ code: "export default 1" })).value).toBe(1);
    } finally {
      rmSync(cacheDir, { recursive: true, force: true });
    }
  });

  it("a function whose runs fill Deno's cache is given a new process, its runs never fail for it", async () => {
    await using own = await createSandbox({ engine: "deno", spareInstances: 0, deno: { diskMb: 8 } });
    // Every module-form run adds a code-cache entry for its module (here ~1 MB): 32 MB is half
    // the cache's bound (MIN_CACHE_BYTES), past which the process serves no further run.
    const code = `import { y } from "lib";\nconst text = "${"x".repeat(1 << 20)}";\nexport default () => Deno.pid + y + text.length * 0;`;
    const pids = new Set<unknown>();
    for (let i = 0; i < 45; i++) {
      const result = await own.run({ code, imports: { lib: "export const y = 0" } });
      pids.add(completed(result).value);
    }
    expect(pids.size).toBeGreaterThan(1);
  });

  it("rewriting the same file over and over stays within the limit (the bytes written are not what is held)", async () => {
    const code = `export default () => {
      for (let i = 0; i < 100; i++) Deno.writeFileSync("same", new Uint8Array(1 << 20).fill(i));
      return Deno.readFileSync("same")[0];
    }`;
    expect(completed(await sandbox.run({ code, limits: long })).value).toBe(99);
  });

  it("options.deno.diskMb must be a positive number", async () => {
    for (const diskMb of [0, -1, "64", Number.NaN, 1e9]) {
      await expect(createSandbox({ engine: "deno", deno: { diskMb: diskMb as number } })).rejects.toThrow(
        /options\.deno\.diskMb/,
      );
    }
  });
});

describe("measuring a private directory", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "cordon-disk-test-"));
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("counts allocated blocks (a sparse file costs nothing), hard links once, and what is in subdirectories", async () => {
    mkdirSync(join(dir, "sub/deeper"), { recursive: true });
    writeFileSync(join(dir, "sub/deeper/data"), Buffer.alloc(1 << 20, 1));
    linkSync(join(dir, "sub/deeper/data"), join(dir, "link"));
    const sparse = join(dir, "sparse");
    writeFileSync(sparse, "");
    const { truncateSync } = await import("node:fs");
    truncateSync(sparse, 1 << 30);
    const measured = await measureDir(dir, 2 ** 40, 1000);
    expect(measured.entries).toBe(5);
    expect(measured.bytes).toBeGreaterThanOrEqual(1 << 20);
    expect(measured.bytes).toBeLessThan(2 << 20);
  });

  it("stops at the first entry past its bound", async () => {
    for (let i = 0; i < 50; i++) writeFileSync(join(dir, `empty${i}`), "");
    const measured = await measureDir(dir, 2 ** 40, 20);
    expect(measured.entries).toBe(21);
  });

  it("a watched directory past MAX_DISK_ENTRIES is over its limit though it holds no bytes; a busy process is measured again", async () => {
    const many = join(dir, "many");
    mkdirSync(many);
    for (let i = 0; i < MAX_DISK_ENTRIES; i++) writeFileSync(join(many, `f${i}`), "");
    const reasons: string[] = [];
    const watch = new DiskWatch(many, 2 ** 40, (why) => reasons.push(why));
    // No bytes written, but CPU used: measured (10 000 entries: within the bound).
    await watch.poll({ writtenBytes: 0, cpuNs: 200_000_000n }, 1000);
    expect(reasons).toEqual([]);
    writeFileSync(join(many, "one-more"), "");
    // Too soon after the last measurement, then late enough.
    expect(watch.poll({ writtenBytes: 0, cpuNs: 400_000_000n }, 1100)).toBeUndefined();
    await watch.poll({ writtenBytes: 0, cpuNs: 400_000_000n }, 1300);
    expect(reasons).toEqual([
      `over its disk limit (its private directory holds more than ${MAX_DISK_ENTRIES} files and directories)`,
    ]);
  });

  it("counts the deleted files a process holds open, each once, and its descriptors", async () => {
    const path = join(dir, "deleted");
    const fd = openSync(path, "w");
    const again = openSync(path, "r");
    try {
      writeSync(fd, Buffer.alloc(1 << 20, 1));
      const before = await measureDeletedOpenFiles(process.pid, 100_000);
      unlinkSync(path);
      const after = await measureDeletedOpenFiles(process.pid, 100_000);
      expect(after.bytes - before.bytes).toBeGreaterThanOrEqual(1 << 20);
      expect(after.bytes - before.bytes).toBeLessThan(2 << 20);
      expect(after.fds).toBeGreaterThan(2);
      expect((await measureDeletedOpenFiles(process.pid, 2)).fds).toBe(3);
      expect(await measureDeletedOpenFiles(2 ** 30, 10)).toEqual({ bytes: 0, fds: 0 });
    } finally {
      closeSync(fd);
      closeSync(again);
    }
  });

  it("bytes written since the last measurement that could pass the limit make a measurement at once", async () => {
    const some = join(dir, "some");
    mkdirSync(some);
    writeFileSync(join(some, "data"), Buffer.alloc(2 << 20, 1));
    const reasons: string[] = [];
    const watch = new DiskWatch(some, 1 << 20, (why) => reasons.push(why));
    // Idle (no CPU), 512 KB written: cannot be over 1 MB, not measured.
    expect(watch.poll({ writtenBytes: 512 << 10, cpuNs: 0n }, 0)).toBeUndefined();
    await watch.poll({ writtenBytes: 2 << 20, cpuNs: 0n }, 1);
    expect(reasons).toEqual(["over its disk limit (its private directory holds more than 1 MB)"]);
  });
});
