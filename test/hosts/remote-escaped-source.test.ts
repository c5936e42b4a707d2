import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { SECRET, startExecutor } from "../executor/helpers.js";

/**
 * A module the sandbox takes (3 M characters, under its 16 Mi) grew sixfold when normalized while
 * esbuild wrote each CJK character as `\u4E00`. The executor's /host schema counted that escaped
 * text against the sandbox's 16 Mi characters, so once its body cap let the body in, it answered
 * 400 "source.code: Too big", which the client reported as ERR_EXECUTOR_UNREACHABLE. (esbuild now
 * keeps non-ASCII text as it is; the body is ~9 MB of UTF-8.)
 */
describe("the remote host and a module of non-ASCII characters", () => {
  const code = `export default () => "${"\u4e00".repeat(3_000_000)}"`;
  const limits = { wallTimeMs: 60_000, maxOutputBytes: 64 * 1024 * 1024 };

  it("runs on an executor whose body cap takes it, as it does in-process", async () => {
    await using inprocess = await createSandbox({ engine: "v8", host: "inprocess" });
    const local = await inprocess.run({ code, limits });
    expect(local.ok && (local.value as string).length).toBe(3_000_000);

    const service = await startExecutor({ maxBodyMb: 128 });
    await using _executor = service.executor;
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    const result = await sandbox.run({ code, limits });
    expect(result.ok, JSON.stringify(!result.ok && result.error)).toBe(true);
    expect(result.ok && (result.value as string).length).toBe(3_000_000);
    const prefix = await sandbox.prepare({ code, limits });
    const call = await prefix.call({ export: "default", args: [] });
    expect(call.ok && (call.value as string).length).toBe(3_000_000);
  }, 180_000);

  it("over the default body cap: ERR_COMPILE naming the cap and how to raise it", async () => {
    const service = await startExecutor();
    await using _executor = service.executor;
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    // 12 M characters, 36 MB of UTF-8: past the executor's default 32 MiB body cap.
    const result = await sandbox.run({ code: `export default () => "${"\u4e00".repeat(12_000_000)}"`, limits });
    expect(!result.ok && result.error.code).toBe("ERR_COMPILE");
    if (!result.ok)
      expect(result.error.message).toMatch(/limit of 33554432 bytes \(executor option maxBodyMb, cordon serve --max-body-mb\)/);
  }, 180_000);
});
