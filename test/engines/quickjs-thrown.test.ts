import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";

/**
 * What a guest throws while its module evaluates reaches the caller as v8 reports it: bounded by
 * the output limit, and an Error's message and stack kept whatever else it holds. The QuickJS
 * worker used to copy the thrown value out whole (vm.dump): a 200 MB Error came back as
 * `Uncaught ""`, an Error whose cause was itself as `Uncaught "Error: boom"`.
 */
const LIMIT = 1024 * 1024;
const BIG = `"x".repeat(${2 * LIMIT})`;
// An import makes the module form (evaluated by QuickJS as a module), none the script form.
const FORMS = { script: "", module: 'import m from "m"; ' };

describe.each(["quickjs", "v8"] as const)("%s: a throw at a module's top level", (engine) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ engine, host: "inprocess" });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  const run = (code: string) => sandbox.run({ code, imports: { m: "export default 1" }, limits: { maxOutputBytes: LIMIT } });

  for (const [form, head] of Object.entries(FORMS)) {
    it(`${form} form: a string past the output limit is ERR_OUTPUT_TOO_LARGE`, async () => {
      const result = await run(`${head}throw ${BIG}`);
      expect(result.ok ? "completed" : result.error.code).toBe("ERR_OUTPUT_TOO_LARGE");
      if (!result.ok) expect(result.error.message).toContain(`larger than the limit of ${LIMIT} bytes`);
    });

    it(`${form} form: an Error whose message is past the output limit is ERR_OUTPUT_TOO_LARGE`, async () => {
      const result = await run(`${head}throw new Error(${BIG})`);
      expect(result.ok ? "completed" : result.error.code).toBe("ERR_OUTPUT_TOO_LARGE");
    });

    it(`${form} form: an Error that is its own cause keeps its message and stack`, async () => {
      const result = await run(`${head}const e = new Error("boom"); e.cause = e; throw e`);
      expect(result.ok ? "completed" : result.error.code).toBe("ERR_USER_CODE");
      if (result.ok) return;
      expect(result.error.message).toBe("boom");
      expect(result.error.stack).toMatch(/^Error: boom\n\s+at .*<guest>:1:/);
    });
  }

  it("script form: a long string is named as a call's throw is, whole in fields.thrown", async () => {
    const result = await run(`throw "x".repeat(3000)`);
    if (result.ok) throw new Error("completed");
    expect(result.error.code).toBe("ERR_USER_CODE");
    expect(result.error.message).toBe("Uncaught string");
    expect(result.error.fields?.thrown).toBe("x".repeat(3000));
  });
});
