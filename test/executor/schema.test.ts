import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { refusal, startExecutor, type TestExecutor } from "./helpers.js";

/** Nested arrays: depth 1 is `[0]`. */
function nested(depth: number): unknown {
  let value: unknown = 0;
  for (let i = 0; i < depth; i++) value = [value];
  return value;
}

describe("POST /run takes exactly the run schema", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor();
  });
  afterAll(() => t.executor.close());

  async function refused(body: unknown) {
    const answer = await refusal(await t.run(body));
    expect(answer).toMatchObject({ status: 400, code: "ERR_BAD_REQUEST" });
    return answer.message;
  }

  it("refuses unknown keys, at the top and inside limits, naming them", async () => {
    expect(await refused({ code: "return 1", globals: {} })).toMatch(/^globals: unknown field; allowed: code, input/);
    expect(await refused({ code: "return 1", limits: { cpuTimeMs: 10, heapMb: 5 } })).toMatch(/^limits\.heapMb: unknown field/);
    // why: `capabilities` is a library option; over HTTP it is not offered at all.
    expect(await refused({ code: "return 1", capabilities: { net: ["*"] } })).toMatch(/^capabilities: unknown field/);
  });

  it("names at most ten unknown keys, shortened: a refusal never echoes the body back", async () => {
    // 200,000 unknown keys came back as a refusal as large as the body. (Past 101,000 values
    // a body is now refused before it is parsed: 90,000 keys still reach the schema.)
    const body: Record<string, unknown> = { code: "return 1" };
    for (let i = 0; i < 90_000; i++) body[`k${i}${"x".repeat(60)}`] = 1;
    const message = await refused(body);
    expect(message).toMatch(/and 89990 more: unknown fields/);
    expect(message.length).toBeLessThan(1000);
  });

  it("refuses wrong types, naming the field", async () => {
    expect(await refused({ code: 42 })).toMatch(/^code: .*expected string/);
    expect(await refused({ input: 1 })).toMatch(/^code: /);
    expect(await refused({ code: "return 1", filename: 7 })).toMatch(/^filename: /);
    expect(await refused({ code: "return 1", limits: { wallTimeMs: "100" } })).toMatch(/^limits\.wallTimeMs: .*expected number/);
    expect(await refused({ code: "return 1", limits: { memoryMb: 0 } })).toMatch(/^limits\.memoryMb: /);
    expect(await refused({ code: "return 1", limits: { cpuTimeMs: -5 } })).toMatch(/^limits\.cpuTimeMs: /);
    expect(await refused({ code: "return 1", imports: { util: { f: 1 } } })).toMatch(/^imports\.util: .*expected string/);
    expect(await refused({ code: "return 1", limits: [] })).toMatch(/^limits: /);
    expect(await refused([{ code: "return 1" }])).toMatch(/^body: .*expected object/);
    expect(await refused(null)).toMatch(/^body: /);
  });

  it("checks an import named __proto__ as any other import, and runs it", async () => {
    // why: zod's record skips a "__proto__" key (neither checked nor copied): it was dropped, and
    // unchecked besides — any JSON value reached the sandbox's imports.
    expect(await refused({ code: "return 1", imports: JSON.parse('{"__proto__": {"f": 1}}') })).toMatch(
      /^imports\.__proto__: .*expected string/,
    );
    const result = await t.runResult({
      code: "import x from '__proto__'; export default () => x",
      imports: JSON.parse('{"__proto__": "export default 5"}'),
    });
    expect(result).toMatchObject({ status: "completed", value: 5 });
  });

  it("refuses sizes out of bounds", async () => {
    expect(await refused({ code: "return 1", filename: "f".repeat(257) })).toMatch(/^filename: /);
    const imports = Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`m${i}`, "export default 1"]));
    expect(await refused({ code: "return 1", imports })).toMatch(/^imports: at most 256 imports/);
  });

  it("bounds the input: nesting of 64 passes, 65 is refused; more than 100 000 values is refused", async () => {
    expect(await refused({ code: "return 1", input: nested(65) })).toBe("input: nested deeper than 64 levels");
    expect(await refused({ code: "return 1", input: { a: { b: nested(63) } } })).toBe("input: nested deeper than 64 levels");
    expect(await refused({ code: "return 1", input: new Array(100_000).fill(0) })).toBe("input: more than 100000 values");
    // why: exactly at both bounds — the outer array, 63 nested arrays and their leaf, and zeros: 100 000 values.
    const ok = await t.runResult({ code: "return input.length", input: [nested(63), ...new Array(99_935).fill(0)] });
    expect(ok).toMatchObject({ status: "completed", value: 99_936 });
  });

  it("weighs the body before parsing it: more values than any valid run holds is refused unparsed", async () => {
    // why: JSON.parse ran first, on the service's thread: a million keys held it 2-7 s per
    // request, every other client waiting. Zod's or the input bound's refusal came after.
    // Built by repeat(): a slow build here would stall the executor, which shares this thread.
    const keys = `{${'"k":1,'.repeat(200_000)}"k":1}`;
    expect(await refused(`{"code":"return 1","input":${keys}}`)).toBe(
      "the body holds more than 101000 JSON values: no valid request does",
    );
    expect(await refused(`{"code":"return 1","x":[${"0,".repeat(200_000)}0]}`)).toMatch(/more than 101000 JSON values/);
  });

  it("refuses a malformed call, naming the field, and input beside call", async () => {
    expect(await refused({ code: "return 1", call: { export: "a..b" } })).toMatch(/^call\.export: must be a dotted export path/);
    expect(await refused({ code: "return 1", call: { export: "f", args: 1 } })).toMatch(/^call\.args: .*expected array/);
    expect(await refused({ code: "return 1", call: { export: "f", this: 1 } })).toBe(
      "call.this: unknown field; allowed: export, args",
    );
    expect(await refused({ code: "return 1", call: { args: [] } })).toMatch(/^call\.export: /);
    expect(await refused({ code: "return 1", input: 1, call: { export: "f" } })).toBe("a run takes input or call, not both");
    expect(await refused({ code: "return 1", call: { export: "f", args: [nested(64)] } })).toBe(
      "call.args: nested deeper than 64 levels",
    );
  });

  it("refuses a body that is not JSON, without quoting it", async () => {
    const message = await refused('{"code": "return 1", oops}');
    expect(message).toBe("the body must be UTF-8 JSON: a run request object");
    expect(await refused("")).toBe("the body must be UTF-8 JSON: a run request object");
  });

  it("keeps the connection usable: a refusal after the whole body was read is an ordinary answer", async () => {
    const result = await t.runResult({ code: "return input * 2", input: 4 });
    expect(result).toMatchObject({ status: "completed", value: 8 });
  });
});
