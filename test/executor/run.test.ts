import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startExecutor, type TestExecutor } from "./helpers.js";

describe("POST /run answers 200 with the RunResult", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor();
  });
  afterAll(() => t.executor.close());

  it("a run that completes: the value, logs and stats", async () => {
    const result = await t.runResult({
      code: "export default (i: { n: number }) => { console.log('doubling', i.n); return i.n * 2 }",
      input: { n: 21 },
      filename: "double.ts",
    });
    expect(result).toMatchObject({ status: "completed", ok: true, value: 42, logs: [{ level: "log", message: "doubling 21" }] });
    expect(result.stats).toMatchObject({ host: "process", bridgeCalls: 0 });
  });

  it("a guest failure is still a 200, with the failed status and code", async () => {
    const response = await t.run({ code: "export default () => { throw new TypeError('nope') }", filename: "bad.js" });
    expect(response.status).toBe(200);
    const result = (await response.json()) as {
      status: string;
      ok: boolean;
      error: { code: string; name: string; message: string };
    };
    expect(result).toMatchObject({
      status: "failed",
      ok: false,
      error: { code: "ERR_USER_CODE", name: "TypeError", message: "nope" },
    });
  });

  it("a limit that fires is a result too", async () => {
    const result = await t.runResult({
      code: "export default () => { for (;;) {} }",
      limits: { cpuTimeMs: 100, wallTimeMs: 300 },
    });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error.code).toMatch(/^ERR_(CPU|WALL)_TIMEOUT$/);
  });

  it("a module that fails to evaluate or compile comes back as the same result shape", async () => {
    const thrown = await t.runResult({ code: "throw new RangeError('at load'); export default () => 1" });
    expect(thrown).toMatchObject({ status: "failed", error: { code: "ERR_USER_CODE", name: "RangeError", message: "at load" } });
    const broken = await t.runResult({ code: "export default (" });
    expect(broken).toMatchObject({ status: "failed", error: { code: "ERR_COMPILE" } });
  });

  it("values that are not JSON cross in the codec's tagged form", async () => {
    const response = await t.run({
      code: "export const when = new Date(0); export default () => ({ big: 2n ** 70n, m: new Map([['k', new Set([1])]]), u: undefined, bytes: new Uint8Array([1, 2]) })",
    });
    const raw = (await response.json()) as { value: Record<string, unknown>; exports: Record<string, unknown>; stats: object };
    expect(raw.value.big).toEqual({ $: "b", v: (2n ** 70n).toString() });
    expect(raw.value.u).toEqual({ $: "u" });
    expect(raw.exports.when).toEqual({ $: "d", v: 0 });
    // why: the envelope stays plain JSON — no tagged undefined in stats.
    expect(JSON.stringify(raw.stats)).not.toContain('"$"');
    const decoded = await t.runResult({
      code: "export default () => ({ m: new Map([['k', new Set([1])]]), bytes: new Uint8Array([1, 2]) })",
    });
    expect(decoded.ok && decoded.value).toEqual({ m: new Map([["k", new Set([1])]]), bytes: new Uint8Array([1, 2]) });
  });

  it("source-text imports and function bodies work as in the library", async () => {
    const result = await t.runResult({
      code: "import { slug } from 'text'; export default (i) => slug(i)",
      input: "Hello World",
      imports: { text: "export const slug = (s) => s.toLowerCase().replace(/\\s+/g, '-')" },
    });
    expect(result).toMatchObject({ status: "completed", value: "hello-world" });
    expect(await t.runResult({ code: "return input + 1", input: 1 })).toMatchObject({ value: 2 });
  });

  it("answers with the body's length in bytes, JSON's type and no-store (the answer is written directly)", async () => {
    // why: app.ts writes the head itself; a length in characters would cut a non-ASCII answer short.
    const response = await t.run({ code: "export default () => 'héllo €'" });
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(response.headers.get("content-length")).toBe(String(bytes.length));
    expect(response.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(response.headers.get("cache-control")).toBe("no-store");
    expect(JSON.parse(new TextDecoder().decode(bytes))).toMatchObject({ ok: true, value: "héllo €" });
  });

  it("a default export that is not a function is the value itself", async () => {
    for (let i = 0; i < 2; i++) {
      const result = await t.runResult({ code: "export const n = 1; export default { answer: 42 }" });
      expect(result).toMatchObject({ status: "completed", value: { answer: 42 }, exports: { n: 1 } });
    }
  });
});
