import { afterEach, describe, expect, it } from "vitest";
import { environmentDefaults } from "../../src/core/selection.js";
import { createSandbox } from "../../src/index.js";

const saved = { ...process.env };
afterEach(() => {
  for (const key of ["CORDON_ENGINE", "CORDON_HOST", "CORDON_EXEC_URL"]) {
    if (saved[key] === undefined) delete process.env[key];
    else process.env[key] = saved[key];
  }
});

/** The process warnings emitted while `run` runs (they are delivered on a later tick). */
async function warnings(run: () => void): Promise<string[]> {
  const seen: string[] = [];
  const listener = (warning: Error) => seen.push(warning.message);
  process.on("warning", listener);
  run();
  await new Promise((resolve) => setImmediate(resolve));
  process.off("warning", listener);
  return seen;
}

describe("selection from the environment", () => {
  it("reads CORDON_ENGINE, CORDON_HOST and CORDON_EXEC_URL", () => {
    expect(environmentDefaults({})).toEqual({ engine: "auto", host: "auto", execUrl: undefined });
    expect(environmentDefaults({ CORDON_ENGINE: "quickjs", CORDON_HOST: "inprocess" })).toMatchObject({
      engine: "quickjs",
      host: "inprocess",
    });
    expect(environmentDefaults({ CORDON_EXEC_URL: "http://exec:8787" }).execUrl).toBe("http://exec:8787");
  });

  it("an unrecognised value reads as auto and warns, naming it", async () => {
    const seen = await warnings(() => {
      expect(environmentDefaults({ CORDON_ENGINE: "v9", CORDON_HOST: "inproces" })).toMatchObject({
        engine: "auto",
        host: "auto",
      });
    });
    expect(seen.join("\n")).toContain('CORDON_ENGINE="v9"');
    expect(seen.join("\n")).toContain('CORDON_HOST="inproces"');
  });

  it("CORDON_ENGINE=trusted never turns a sandbox into none: it reads as auto and warns; code may still name it", async () => {
    // why: obeyed, a variable meant for a developer's machine made createSandbox() and
    // `cordon run` run guests in the host process (the guest read process.pid and the env).
    process.env.CORDON_ENGINE = "trusted";
    process.env.CORDON_HOST = "inprocess";
    const seen = await warnings(() => {
      expect(environmentDefaults().engine).toBe("auto");
    });
    expect(seen.join("\n")).toContain('CORDON_ENGINE="trusted" is ignored');
    await using fromEnv = await createSandbox();
    expect(fromEnv.engineName).not.toBe("trusted");
    const result = await fromEnv.run({ code: `export default () => typeof process` });
    expect(result.ok && result.value).toBe("undefined");
    await using named = await createSandbox({ engine: "trusted" });
    expect(named.engineName).toBe("trusted");
  });

  it("createSandbox takes its defaults from the environment; options in code win", async () => {
    process.env.CORDON_ENGINE = "quickjs";
    process.env.CORDON_HOST = "inprocess";
    await using fromEnv = await createSandbox();
    const result = await fromEnv.run({ code: "export default 1" });
    expect(result.stats).toMatchObject({ engine: "quickjs", host: "inprocess" });
    await using inCode = await createSandbox({ engine: "v8" });
    expect((await inCode.run({ code: "export default 1" })).stats.engine).toBe("v8");
  });

  it('"remote" without an executor URL is a start-up error', async () => {
    process.env.CORDON_HOST = "remote";
    await expect(createSandbox()).rejects.toMatchObject({
      code: "ERR_ENGINE_UNAVAILABLE",
      message: expect.stringContaining("CORDON_EXEC_URL"),
    });
  });
});
