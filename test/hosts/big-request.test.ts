import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { SECRET, startExecutor } from "../executor/helpers.js";

/**
 * Requests built from guest data larger than a frame (64 MiB) between the host and a worker.
 * They threw a RangeError out of run()/call() (and `cordon serve` answered 500): each fails its
 * own request as a result, and the worker serves the next one.
 */
describe("the process host and a request over the pipe's frame limit", () => {
  // 12 M control characters (under the 16 Mi code limit), which a frame's JSON escapes as
  // `\u0001`: the script form alone makes a ~72 MB frame (a worker gets only that form: host.ts forWorker).
  const bigModule = `export default "${"\u0001".repeat(12_000_000)}".length`;
  const limits = { wallTimeMs: 60_000 };

  it("a module: ERR_COMPILE, for run, prefix run and prepare", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", spareInstances: 0 });
    const result = await sandbox.run({ code: bigModule, limits });
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.error.code).toBe("ERR_COMPILE");
      expect(result.error.message).toMatch(/too large for the pipe to a worker process: a frame of \d+ bytes/);
      // The frame carries the module once, as its script form: ~72 MB (both forms would be ~144 MB).
      expect(Number(/a frame of (\d+) bytes/.exec(result.error.message)?.[1])).toBeLessThan(100_000_000);
    }
    const prefix = await sandbox.prepare({ code: "export const n = 1" });
    const prefixRun = await prefix.run({ code: bigModule, limits });
    expect(!prefixRun.ok && prefixRun.error.code).toBe("ERR_COMPILE");
    await expect(sandbox.prepare({ code: bigModule, limits })).rejects.toMatchObject({ code: "ERR_COMPILE" });
    const next = await sandbox.run({ code: "export default (n) => n + 1", input: 1 });
    expect(next.ok && next.value).toBe(2);
  }, 120_000);

  it("a run's input and a call's arguments: ERR_NOT_SERIALIZABLE", async () => {
    await using sandbox = await createSandbox({ engine: "quickjs", host: "process", spareInstances: 0 });
    // A control character is 6 bytes in JSON: 12 M of them, 72 MB.
    const big = "\u0001".repeat(12_000_000);
    const run = await sandbox.run({ code: "export default (s) => s.length", input: big });
    expect(!run.ok && run.error.code).toBe("ERR_NOT_SERIALIZABLE");
    if (!run.ok) expect(run.error.message).toMatch(/the run's input is too large/);
    const prefix = await sandbox.prepare({ code: "export function f(s) { return s.length }" });
    const call = await prefix.call({ export: "f", args: [big] });
    expect(!call.ok && call.error.code).toBe("ERR_NOT_SERIALIZABLE");
    if (!call.ok) expect(call.error.message).toMatch(/the call's arguments are too large/);
    const again = await prefix.call({ export: "f", args: ["abc"] });
    expect(again.ok && again.value).toBe(3);
  }, 120_000);

  it("a result over a frame (maxOutputBytes raised past 64 MiB): ERR_OUTPUT_TOO_LARGE, the worker lives on", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", spareInstances: 0 });
    const code = `export default () => "\\u0001".repeat(12_000_000)`;
    const result = await sandbox.run({ code, limits: { maxOutputBytes: 100 * 1024 * 1024, wallTimeMs: 30_000, memoryMb: 1024 } });
    expect(!result.ok && result.error.code).toBe("ERR_OUTPUT_TOO_LARGE");
    // The same memory limit: the worker's resident size after that result is its budget's business.
    const next = await sandbox.run({ code: "export default (n) => n + 1", input: 1, limits: { memoryMb: 1024 } });
    expect(next, JSON.stringify(next)).toMatchObject({ ok: true, value: 2 });
  }, 120_000);
});

describe("the remote host and a request over the executor's body cap", () => {
  it("the module: ERR_COMPILE; the input: ERR_NOT_SERIALIZABLE (was ERR_EXECUTOR_UNREACHABLE)", async () => {
    const service = await startExecutor({ maxBodyMb: 1 });
    await using _executor = service.executor;
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    // 600 k characters, twice (module and script forms): over a 1 MiB body.
    const big = await sandbox.run({ code: `export default "${"x".repeat(600_000)}".length` });
    expect(!big.ok && big.error.code).toBe("ERR_COMPILE");
    if (!big.ok) expect(big.error.message).toMatch(/too large for the executor at .*ERR_BODY_TOO_LARGE/);
    const input = await sandbox.run({ code: "export default (s) => s.length", input: "x".repeat(2_000_000) });
    expect(!input.ok && input.error.code).toBe("ERR_NOT_SERIALIZABLE");
    const prefix = await sandbox.prepare({ code: "export function f(s) { return s.length }" });
    const call = await prefix.call({ export: "f", args: ["x".repeat(2_000_000)] });
    expect(!call.ok && call.error.code).toBe("ERR_NOT_SERIALIZABLE");
    const next = await sandbox.run({ code: "export default (n) => n + 1", input: 1 });
    expect(next.ok && next.value).toBe(2);
  }, 120_000);
});
