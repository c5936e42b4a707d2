import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";

/** The trusted engine is the contract without the sandbox: these pin both halves of that. */
describe("trusted engine", () => {
  it("runs a module with input, captures console, crosses values as data", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const result = await sandbox.run({
      code: "export const config = { a: 1 }; export function helper() {}; export default (i) => { console.log('n is', i.n); return { doubled: i.n * 2, when: new Date(0) } }",
      input: { n: 21 },
    });
    expect(result).toMatchObject({
      ok: true,
      value: { doubled: 42, when: new Date(0) },
      exports: { config: { a: 1 } },
      skippedExports: ["helper"],
    });
    expect(result.logs).toMatchObject([{ level: "log", message: "n is 21" }]);
    expect(result.stats).toMatchObject({ engine: "trusted", host: "inprocess" });
  });

  // why: the host weighs what a guest sends (at most 1,000,000 objects and arrays); trusted code
  // runs on the host's thread already, and the host's own input is not weighed on any engine.
  it("weighs neither the host's input nor the trusted code's value", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const input = Array.from({ length: 1_000_001 }, () => ({}));
    const result = await sandbox.run({ code: "export default (i) => [i.length, ...i]", input });
    expect(result.ok && (result.value as unknown[]).length).toBe(1_000_002);
  });

  // why: readExports ran the module's default export here (prepare was read as run).
  it("readExports says what the default export is without calling it", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const read = await sandbox.readExports({ code: "export const a = 1; export default () => { throw new Error('called') }" });
    expect(read).toEqual({ exports: { a: 1 }, skippedExports: [], defaultExport: "function" });
  });

  it("calls an export with run({ call }): a Request in, a Response out, a missing path named", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const code = "export default { async fetch(r) { return new Response(r.method + ' ' + (await r.text()), { status: 202 }) } }";
    const request = new Request("http://a.example/", { method: "PUT", body: "x" });
    const result = await sandbox.run({ code, call: { export: "default.fetch", args: [request] } });
    const response = result.ok ? (result.value as Response) : undefined;
    expect([response?.status, await response?.text()]).toEqual([202, "PUT x"]);
    const missing = await sandbox.run({ code, call: { export: "default.nope" } });
    expect(missing.ok ? undefined : missing.error).toMatchObject({
      code: "ERR_CALL_TARGET_NOT_FOUND",
      message: expect.stringContaining('"default.nope"'),
    });
  });

  it("reads a returned Response's body within the run's limits: too long or stalled, it fails", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const endless = "export default () => new Response(new ReadableStream({ pull(c) { c.enqueue(new Uint8Array(65536)) } }))";
    const long = await sandbox.run({ code: endless, limits: { maxOutputBytes: 1024 * 1024 } });
    expect(long.ok ? "completed" : long.error).toMatchObject({
      code: "ERR_OUTPUT_TOO_LARGE",
      message: "value's body is larger than the limit of 1048576 bytes",
    });
    const stalled = "export default () => new Response(new ReadableStream({ pull: () => new Promise(() => {}) }))";
    const started = performance.now();
    const late = await sandbox.run({ code: stalled, limits: { wallTimeMs: 300 } });
    expect(late.ok ? "completed" : late.error.code).toBe("ERR_WALL_TIMEOUT");
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it("is no sandbox: the host process is reachable, as the README says", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const result = await sandbox.run({ code: "export default () => typeof process.pid" });
    expect(result.ok && result.value).toBe("number");
  });

  it("installs globals for the run and restores the host's global object after it", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const hostConsole = globalThis.console;
    const result = await sandbox.run({
      code: "export default async () => ({ region: config.region, user: await lookup(7) })",
      globals: { config: { region: "eu" }, lookup: async (id: number) => ({ id }) },
    });
    expect(result.ok && result.value).toEqual({ region: "eu", user: { id: 7 } });
    expect((globalThis as Record<string, unknown>).config).toBeUndefined();
    expect((globalThis as Record<string, unknown>).lookup).toBeUndefined();
    expect(globalThis.console).toBe(hostConsole);
  });

  it("serializes runs: one run's globals never show in another's", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const code =
      "export default async () => { const mine = tag; await new Promise((r) => setTimeout(r, 30)); return [mine, tag] }";
    const [a, b] = await Promise.all([
      sandbox.run({ code, globals: { tag: "a" } }),
      sandbox.run({ code, globals: { tag: "b" } }),
    ]);
    expect(a.ok && a.value).toEqual(["a", "a"]);
    expect(b.ok && b.value).toEqual(["b", "b"]);
  });

  it("has a soft timeout, errors as results, and refuses what it cannot do", async () => {
    await using sandbox = await createSandbox({ engine: "trusted" });
    const slow = await sandbox.run({
      code: "export default () => new Promise((r) => setTimeout(r, 2000))",
      limits: { wallTimeMs: 100 },
    });
    expect(slow.ok ? "completed" : slow.error.code).toBe("ERR_WALL_TIMEOUT");
    const thrown = await sandbox.run({ code: "export default () => { throw new RangeError('bad') }" });
    expect(thrown.ok ? "completed" : thrown.error).toMatchObject({ code: "ERR_USER_CODE", name: "RangeError", message: "bad" });
    const imports = await sandbox.run({ code: "import x from 'lib'; export default x", imports: { lib: "export default 1" } });
    expect(imports.ok ? "completed" : imports.error.code).toBe("ERR_MODULE_NOT_FOUND");
    await expect(sandbox.prepare({ code: "export default 1" })).rejects.toMatchObject({ code: "ERR_ENGINE_UNAVAILABLE" });
  });

  it("is only chosen when named: auto never picks it, and it never runs in a worker process", async () => {
    await using auto = await createSandbox();
    expect((await auto.run({ code: "export default 1" })).stats.engine).not.toBe("trusted");
    await expect(createSandbox({ engine: "trusted", host: "process" })).rejects.toThrow(/trusted engine runs in this process/);
  });
});
