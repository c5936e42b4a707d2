import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";

/** Calls made before a prefix's dispose() are served, whatever they need to be served. */
describe.each(COMBINATIONS)("calls made before dispose on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it("complete when they need a new instance whose prefix calls host functions as it evaluates", async () => {
    // The process host dropped the prefix's host functions at dispose(): a call warming a second
    // instance afterwards failed with "the run is over" (ERR_USER_CODE).
    const prefix = await sandbox.prepare({
      code: "const seed = await config(); export async function get(n) { await pause(); return n + seed }",
      globals: {
        config: () => new Promise((resolve) => setTimeout(() => resolve(100), 50)),
        pause: () => new Promise((resolve) => setTimeout(resolve, 50)),
      },
      limits: { wallTimeMs: 10_000 },
    });
    expect((await prefix.call({ export: "get", args: [0] })).ok).toBe(true);
    const calls = Array.from({ length: 6 }, (_, i) => prefix.call({ export: "get", args: [i] }));
    await prefix.dispose();
    const results = await Promise.all(calls);
    expect(results.map((r) => (r.ok ? r.value : `${r.error.code}: ${r.error.message}`))).toEqual([100, 101, 102, 103, 104, 105]);
  });
});
