import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";

describe("the process host and a host function's answer", () => {
  it("an answer larger than a worker's pipe carries is the guest's catchable error, and the host lives on", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", spareInstances: 0 });
    // 70 M characters: over the 64 MiB frame, which ended the host process (an unhandled rejection).
    const code = `export default async () => { try { return (await big()).length } catch (e) { return e.message } }`;
    const result = await sandbox.run({ code, globals: { big: async () => "x".repeat(70 * 1024 * 1024) } });
    expect(result.ok ? result.value : result.error.code).toMatch(/ERR_BRIDGE_PAYLOAD_TOO_LARGE|larger than/);
    const next = await sandbox.run({ code: "export default (n) => n + 1", input: 1 });
    expect(next.ok && next.value).toBe(2);
  }, 60_000);
});
