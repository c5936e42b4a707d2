import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";

describe("the process host and a host function's answer", () => {
  const code = `export default async () => { try { return (await big()).length } catch (e) { return e.message } }`;
  // 70 M characters: over the 64 MiB frame, which ended the host process (an unhandled rejection).
  const big = async () => "x".repeat(70 * 1024 * 1024);

  it("an answer over the run's maxBridgeCallBytes is refused in the host process, before any frame", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", spareInstances: 0 });
    // The default limit (16 MiB): the run ends as it does in process, not with the pipe's error.
    const result = await sandbox.run({ code, globals: { big } });
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.error.code).toBe("ERR_BRIDGE_PAYLOAD_TOO_LARGE");
      expect(result.error.message).toMatch(/result exceeded 16777216 bytes/);
    }
    const next = await sandbox.run({ code: "export default (n) => n + 1", input: 1 });
    expect(next.ok && next.value).toBe(2);
  }, 60_000);

  it("past a frame (a limit raised over 64 MiB), the guest's catchable error, and the host lives on", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", spareInstances: 0 });
    const result = await sandbox.run({ code, globals: { big }, limits: { maxBridgeCallBytes: 100 * 1024 * 1024 } });
    expect(result.ok && result.value).toMatch(/^ERR_BRIDGE_PAYLOAD_TOO_LARGE: .*larger than a worker's pipe carries/);
    const next = await sandbox.run({ code: "export default (n) => n + 1", input: 1 });
    expect(next.ok && next.value).toBe(2);
  }, 60_000);
});
