import { mkdtempSync, rmSync, statSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { spawnerReady, useSpawner } from "../../src/core/spawner.js";
import { findMkfifo, makeFifos } from "../../src/engines/deno/fifos.js";
import { createSandbox } from "../../src/index.js";

/**
 * The Deno protocol's FIFOs are made by the mkfifo command. Without it, a Deno sandbox used to
 * start and then fail its first run with a raw spawn error ("spawn mkfifo ENOENT").
 */
describe("deno: the mkfifo command", () => {
  const path = process.env.PATH;
  const dirs: string[] = [];
  const emptyDir = () => {
    const dir = mkdtempSync(join(tmpdir(), "cordon-no-mkfifo-"));
    dirs.push(dir);
    return dir;
  };

  afterEach(() => {
    process.env.PATH = path;
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it("is found on the PATH", () => {
    expect(findMkfifo()).toMatch(/\/mkfifo$/);
    expect(findMkfifo(emptyDir())).toBeUndefined();
  });

  it("missing: creating the sandbox fails with ERR_ENGINE_UNAVAILABLE, naming what to install", async () => {
    process.env.PATH = emptyDir();
    await expect(createSandbox({ engine: "deno", host: "inprocess" })).rejects.toMatchObject({
      code: "ERR_ENGINE_UNAVAILABLE",
      message: expect.stringContaining("mkfifo"),
    });
  });

  it("one that fails (a path that exists already) is ERR_ENGINE_UNAVAILABLE with mkfifo's own words", async () => {
    const dir = emptyDir();
    const taken = join(dir, "taken");
    symlinkSync("/nonexistent", taken);
    const mkfifo = findMkfifo(path) ?? "mkfifo";
    await expect(makeFifos(mkfifo, [taken])).rejects.toMatchObject({
      code: "ERR_ENGINE_UNAVAILABLE",
      message: expect.stringMatching(/could not make its protocol FIFOs: .*File exists/),
    });
    await expect(makeFifos(join(dir, "no-such-mkfifo"), [join(dir, "x")])).rejects.toMatchObject({
      code: "ERR_ENGINE_UNAVAILABLE",
      message: expect.stringContaining("mkfifo command"),
    });
  });

  // Through the spawner process (once a Deno engine holds it): its words first reached the host
  // only sometimes (the helper read the pipe before handing it over).
  it("run through the spawner process: the FIFOs are made, and a failure still has mkfifo's own words", async () => {
    const release = useSpawner();
    try {
      expect(await spawnerReady()).toBeGreaterThan(0);
      const dir = emptyDir();
      const mkfifo = findMkfifo(path) ?? "mkfifo";
      await makeFifos(mkfifo, [join(dir, "in"), join(dir, "out")]);
      expect(statSync(join(dir, "in")).isFIFO() && statSync(join(dir, "out")).isFIFO()).toBe(true);
      await expect(makeFifos(mkfifo, [join(dir, "in")])).rejects.toMatchObject({
        code: "ERR_ENGINE_UNAVAILABLE",
        message: expect.stringMatching(/could not make its protocol FIFOs: .*File exists/),
      });
      await expect(makeFifos(join(dir, "no-such-mkfifo"), [join(dir, "x")])).rejects.toMatchObject({
        code: "ERR_ENGINE_UNAVAILABLE",
        message: expect.stringContaining("mkfifo command"),
      });
    } finally {
      release();
    }
  });

  it("present: a Deno sandbox runs (the FIFOs made by the found command)", async () => {
    await using sandbox = await createSandbox({ engine: "deno", host: "inprocess" });
    const result = await sandbox.run({ code: "export default () => 6 * 7" });
    expect(result.ok && result.value).toBe(42);
  }, 60_000);
});
