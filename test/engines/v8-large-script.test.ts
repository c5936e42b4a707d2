import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { value } from "../helpers/results.js";

/**
 * A module whose script form is longer than isolated-vm lets an isolate eval (its memory limit in
 * bytes / 8 characters: 1,048,576 at 8 MB, 16,777,216 at the default 128 MB) failed with
 * ERR_USER_CODE "EvalError: Code generation from strings disallowed for this context", an error the
 * guest did not cause. esbuild writes each `一` of a literal as `\u4E00`: 200,000 of them make a
 * 1.2 M-character script form from a 200 K-character module.
 */
const CJK_MODULE = `export default () => "${"一".repeat(200_000)}".length`;

describe("v8: a module whose script form is too long for the isolate's eval", () => {
  for (const host of ["inprocess", "process"] as const) {
    it(`runs (memoryMb 8, host ${host})`, async () => {
      await using sandbox = await createSandbox({ engine: "v8", host, spareInstances: 0 });
      const limits = { memoryMb: 8, wallTimeMs: 15_000 };
      expect(value(await sandbox.run({ code: CJK_MODULE, limits }))).toBe(200_000);
      // A prefix evaluates the same way, and its exports stay callable.
      const prefix = await sandbox.prepare({ code: `${CJK_MODULE}\nexport const twice = (n) => 2 * n`, limits });
      expect(value(await prefix.call({ export: "twice", args: [21] }))).toBe(42);
      // The next run's short module takes the eval again, on the same kind of instance.
      expect(value(await sandbox.run({ code: "export default (n) => n + 1", input: 1, limits }))).toBe(2);
    }, 30_000);
  }

  it("the reported size: 3 M characters of CJK text with the default 128 MB (18 M in script form)", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", spareInstances: 0 });
    const code = `export default () => "${"一".repeat(3_000_000)}".length`;
    expect(value(await sandbox.run({ code, limits: { wallTimeMs: 15_000 } }))).toBe(3_000_000);
  }, 30_000);

  it("its errors read as an eval'd module's do: the caller's file and line, ERR_USER_CODE only for its own throw", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", spareInstances: 0 });
    const limits = { memoryMb: 8, wallTimeMs: 15_000 };
    const body = `export default () => {\n  const s = "${"一".repeat(200_000)}";\n  throw new RangeError("boom " + s.length);\n};`;
    const result = await sandbox.run({ code: body, filename: "tenant.js", limits });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error).toMatchObject({ code: "ERR_USER_CODE", name: "RangeError", message: "boom 200000" });
    expect(result.error.stack).toContain("tenant.js:3:");
    expect(result.error.stack).not.toMatch(/node_modules|file:|data:|\/work\/|<cordon>|isolated-vm/);
    // Thrown at the module's top level, while it evaluates.
    const top = await sandbox.run({ code: `${CJK_MODULE}\nthrow new TypeError("top");`, filename: "top.js", limits });
    expect(!top.ok && top.error).toMatchObject({ code: "ERR_USER_CODE", name: "TypeError", message: "top" });
    if (!top.ok) expect(top.error.stack).toContain("top.js:2:");
  }, 30_000);

  it("a guest's own eval or new Function of a string past the isolate's bound still gets isolated-vm's EvalError", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", spareInstances: 0 });
    const code = `export default () => {
      const text = "'" + "a".repeat(1_100_000) + "'";
      const names = [];
      try { (0, eval)(text) } catch (e) { names.push(e.name) }
      try { new Function("return " + text) } catch (e) { names.push(e.name) }
      names.push((0, eval)("'short'"));
      return names;
    }`;
    expect(value(await sandbox.run({ code, limits: { memoryMb: 8 } }))).toEqual(["EvalError", "EvalError", "short"]);
  }, 30_000);
});
