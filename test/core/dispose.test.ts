import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "../conformance/matrix.js";

/**
 * sandbox.dispose() ends the work in it: runs in progress end with ERR_INSTANCE_RESET, runs still
 * queued for a slot never start, and no guest calls the host afterwards.
 */
describe.each(COMBINATIONS.filter((c) => c.host !== "remote"))("dispose on $name", (combo) => {
  it("ends runs in progress, never starts queued ones, and no host call follows it", async () => {
    const sandbox = await createSandbox({ ...combo.options, maxConcurrentRuns: 1 });
    let calls = 0;
    let disposed = false;
    let callsAfter = 0;
    const started = async () => {
      calls++;
      if (disposed) callsAfter++;
      return 1;
    };
    const code = `export default async () => { await started(); await new Promise((r) => setTimeout(r, 300)); await started(); return "finished"; }`;
    const runs = [0, 1, 2].map(() => sandbox.run({ code, globals: { started }, limits: { wallTimeMs: 5000 } }));
    const until = performance.now() + 5000;
    while (calls === 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 10));
    await sandbox.dispose();
    disposed = true;
    const results = await Promise.all(runs);
    for (const result of results) {
      expect(result.ok, JSON.stringify(result)).toBe(false);
      if (!result.ok) expect(result.error.code).toBe("ERR_INSTANCE_RESET");
    }
    await new Promise((r) => setTimeout(r, 500));
    expect(callsAfter).toBe(0);
    expect(calls).toBe(1);
  }, 20_000);
});
