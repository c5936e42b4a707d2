import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "../conformance/matrix.js";
import { completed, failed } from "../conformance/results.js";

/**
 * What a guest can do to its own outcome: the codes the host reports for limits must be the
 * host's findings, not text the guest wrote; the guest's tampering with builtins must not reach
 * the runtime's outcome channel; what it throws counts against the output limit; a hostile thrown
 * value still ends the run at once; and nothing of the host reaches it through a returned error.
 */
const LIMITS = { cpuTimeMs: 2000, wallTimeMs: 5000 };

describe.each(COMBINATIONS)("guest outcomes on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox?.dispose();
  });

  const run = (code: string, limits: Record<string, number> = {}) => sandbox.run({ code, limits: { ...LIMITS, ...limits } });

  it("a thrown error saying 'memory limit' stays the guest's own error", async () => {
    for (const code of [
      `export default () => { throw new Error("Isolate was disposed during execution due to memory limit") }`,
      `throw new Error("memory limit"); export default 1`,
      `export default () => new Promise((_, reject) => setTimeout(() => reject(new Error("memory limit")), 1))`,
    ]) {
      const error = failed(await run(code)).error;
      expect(error.code, code).toBe("ERR_USER_CODE");
      expect(error.message).toContain("memory limit");
    }
  });

  it("a getter that throws a look-alike of the codec's refusal is a throw, not ERR_OUTPUT_TOO_LARGE", async () => {
    const error = failed(
      await run(`export default () => ({ get x() { throw { code: "ERR_OUTPUT_TOO_LARGE", message: "fake" } } })`),
    ).error;
    expect(error.code).toBe("ERR_USER_CODE");
  });

  it("messages name modules as the guest named them: no internal tags or code prefixes", async () => {
    // QuickJS tags each evaluation's module names (a per-thread counter other tenants share) and
    // its loader's refusal carried an "ERR_MODULE_NOT_FOUND:" prefix into the guest's catch.
    const missing = failed(
      await sandbox.run({ code: `import { nope } from "lib"; export default nope`, imports: { lib: "export const yes = 1" } }),
    );
    expect(missing.error.message).not.toMatch(/\u2063|ERR_/);
    const caught = completed(
      await run(
        `export default async () => { try { await import("nowhere"); return "loaded" } catch (e) { return String(e.message) } }`,
      ),
    ).value as string;
    expect(caught).not.toMatch(/\u2063|^ERR_MODULE_NOT_FOUND/);
  });

  it("a thrown message naming ERR_MODULE_NOT_FOUND is the guest's error", async () => {
    const error = failed(await run(`throw new Error("ERR_MODULE_NOT_FOUND:forged"); export default 1`)).error;
    expect(error.code).toBe("ERR_USER_CODE");
    // The loader's own refusal still is one.
    expect(failed(await run(`import x from "nowhere"; export default x`)).error.code).toBe("ERR_MODULE_NOT_FOUND");
  });

  it("replacing Promise.prototype.then or String.prototype.slice does not reach the outcome", async () => {
    const then = `const t = Promise.prototype.then;
      Promise.prototype.then = function (a, b) { return t.call(this, (v) => a && a(typeof v === "string" ? 'o{"v":' : v), b) };`;
    expect(completed(await run(`${then}\nexport default () => 42`)).value).toBe(42);
    expect(completed(await run(`${then}\nexport default async () => 43`)).value).toBe(43);
    const slice = `String.prototype.slice = () => '{"v":1,"x":{},"k":7}';`;
    expect(completed(await run(`${slice}\nexport default () => "kept"`)).value).toBe("kept");

    const prefix = await sandbox.prepare({
      code: `${then}\nexport function sync(n) { return n + 1 }\nexport async function later(n) { return n * 2 }`,
    });
    try {
      const [a, b] = await Promise.all([prefix.call({ export: "sync", args: [1] }), prefix.call({ export: "later", args: [5] })]);
      expect(completed(a).value).toBe(2);
      expect(completed(b).value).toBe(10);
    } finally {
      await prefix.dispose();
    }
  });

  it("replacing call, apply, charCodeAt or the collections' iterators does not change how values are reported", async () => {
    // The codec called m.call(x) and iterated Maps with for...of: a Map came back as an Invalid
    // Date, a Uint8Array as [] or [0,0,0], a thrown TypeError as a tag's text.
    const patches = [
      "Function.prototype.call = function () { return 'F' };",
      "Function.prototype.apply = function () { return '' };",
      "String.prototype.charCodeAt = function () { return 0 };",
      "const it = Object.getPrototypeOf(new Map().entries()); it.next = function () { return { done: true } };",
      "const si = Object.getPrototypeOf(new Set().values()); si.next = function () { return { done: true } };",
      `Object.defineProperty(Object.getPrototypeOf(Uint8Array.prototype), "length", { get() { return 0 } });`,
    ];
    for (const patch of patches) {
      const value = completed(
        await run(
          `${patch}\nexport default () => ({ map: new Map([["a", 1]]), set: new Set([2]), bytes: new Uint8Array([1, 2, 3]), when: new Date(0) })`,
        ),
      ).value as Record<string, unknown>;
      expect(value.map, patch).toEqual(new Map([["a", 1]]));
      expect(value.set, patch).toEqual(new Set([2]));
      expect(value.bytes, patch).toEqual(new Uint8Array([1, 2, 3]));
      expect(value.when, patch).toEqual(new Date(0));
    }
    const thrown = failed(
      await run(`Function.prototype.call = function () { return 'F' };\nexport default () => { throw new TypeError("boom") }`),
    );
    expect(thrown.error).toMatchObject({ name: "TypeError", message: "boom" });
  });

  it("replacing Math.min, Math.max or Number does not change when timers fire", async () => {
    // The runtime clamped a timer's delay with the guest's own: with Math.min = () => 1e300 the
    // host was asked for a delay of 1e300 ms (it holds delays to 2^31-1 ms: the timer never fired).
    for (const patch of ["Math.min = () => 1e300;", "Math.max = () => -1;", "globalThis.Number = () => 1e12;"]) {
      const result = await run(
        `${patch}
        export default async () => {
          let cleared = "cleared";
          clearTimeout(setTimeout(() => { cleared = "fired after clearTimeout" }, 1));
          await new Promise((r) => setTimeout(r, 10));
          await new Promise((r) => setTimeout(r, 0));
          return cleared;
        }`,
        { wallTimeMs: 3000 },
      );
      expect(result.ok ? result.value : result.error.code, patch).toBe("cleared");
    }
  });

  it("the runtime's host-module table is not reachable through Map.prototype", async () => {
    // __cordon_module looked modules up with the live Map.prototype.get: a run took the table
    // and changed what later runs of the prefix imported.
    await using prefix = await sandbox.prepare({ imports: { db: { answer: 42 } }, code: "export function noop() {}" });
    const grab = await prefix.run({
      code: `const seen = [];
        const saved = {};
        for (const name of ["get", "set", "has", "clear", "delete", "keys", "entries", "forEach"]) {
          const original = (saved[name] = Map.prototype[name]);
          Map.prototype[name] = function (...args) { seen.push(this); return original.apply(this, args) };
        }
        const db = __cordon_module("db");
        for (const name in saved) Map.prototype[name] = saved[name];
        const tables = seen.filter((map) => map.has("db"));
        for (const map of tables) map.set("db", { default: { answer: "forged" }, answer: "forged" });
        export default () => [tables.length, db.answer];`,
    });
    expect(completed(grab).value).toEqual([0, 42]);
    const later = await prefix.run({ code: `import db from "db"; export default () => db.answer` });
    expect(completed(later).value).toBe(42);
  });

  it("what a prefix puts on Object.prototype or RegExp.prototype does not steer the runtime", async () => {
    // The runtime read these through prototypes after guest code: an enumerable name became an
    // export of every later run (esbuild's for...in), an inherited `value` made every export's
    // descriptor invalid, a `readBodies` was called as the runtime's body reader (v8, quickjs),
    // and a RegExp's Symbol.replace wrote the sourceURL line of the next run's script (v8, deno).
    await using prefix = await sandbox.prepare({
      code: `Object.prototype.planted = function () { return "planted" };
        Object.defineProperty(Object.prototype, "value", { value: 1, writable: true, configurable: true });
        Object.prototype.readBodies = () => Promise.resolve(false);
        RegExp.prototype[Symbol.replace] = () => "x\\nglobalThis.injected = true";
        export function echo(x) { return x }`,
    });
    const later = await prefix.run({ code: "export const a = 1;\nexport default () => globalThis.injected ?? 2" });
    expect(completed(later).value).toBe(2);
    expect(completed(later).exports).toEqual({ a: 1 });
    expect(completed(await prefix.call({ export: "echo", args: ["x"] })).value).toBe("x");
  });

  it("the runtime leaves no short-named globals of its own (a minifier's helpers the guest could replace)", async () => {
    const names = completed(
      await run(
        "export default () => Object.getOwnPropertyNames(globalThis).filter((n) => n.length <= 3 && globalThis[n] !== undefined)",
      ),
    ).value as string[];
    // Deno has its own WebGPU global.
    for (const name of names) expect(["NaN", "Map", "Set", "URL", "GPU"], name).toContain(name);
  });

  it("a thrown error counts against maxOutputBytes", async () => {
    for (const thrown of [`new Error("a".repeat(200_000))`, `"a".repeat(200_000)`]) {
      const error = failed(await run(`export default () => { throw ${thrown} }`, { maxOutputBytes: 1000 })).error;
      expect(error.code, thrown).toBe("ERR_OUTPUT_TOO_LARGE");
      expect(JSON.stringify(error).length).toBeLessThan(2000);
    }
    // Refused while it is encoded, as a returned value is: a field that repeats one 1 MB array 300
    // times would be 300 MB of text (before, thrown, it ended in ERR_MEMORY_LIMIT).
    const shared = `const a = Array(1000).fill("x".repeat(1000)); const e = new Error("e"); e.data = Array(300).fill(a); throw e`;
    const big = failed(await run(`export default () => { ${shared} }`, { memoryMb: 64, maxOutputBytes: 1 << 20 })).error;
    expect(big).toMatchObject({ code: "ERR_OUTPUT_TOO_LARGE", message: expect.stringContaining("the error the guest threw") });
    // A small one is reported as it was thrown.
    expect(failed(await run(`export default () => { throw new Error("small") }`, { maxOutputBytes: 1000 })).error.code).toBe(
      "ERR_USER_CODE",
    );
  });

  it("a thrown value whose every trap throws ends the run at once, as the guest's error", async () => {
    for (const thrown of [
      `new Proxy({}, { getPrototypeOf() { throw 2 }, get() { throw 3 }, ownKeys() { throw 4 }, getOwnPropertyDescriptor() { throw 5 } })`,
      `new AggregateError([{ get x() { throw 1 } }], "agg")`,
    ]) {
      const started = performance.now();
      const error = failed(await run(`export default () => { throw ${thrown} }`)).error;
      expect(error.code, thrown).toBe("ERR_USER_CODE");
      expect(performance.now() - started, thrown).toBeLessThan(LIMITS.wallTimeMs);
    }
  });

  it("an error a host function returns reaches the guest without the host's stack", async () => {
    const result = completed(
      await sandbox.run({
        code: `export default async () => {
          const returned = await made();
          let caught; try { await failing(); } catch (e) { caught = e }
          return [String(returned.stack), returned.message, String(caught.stack), String(given.stack), String(given.cause.stack)];
        }`,
        globals: {
          made: async () => new Error("returned"),
          failing: async () => {
            throw new Error("thrown");
          },
          given: new Error("given", { cause: new TypeError("inner") }),
        },
        limits: LIMITS,
      }),
    );
    const texts = result.value as string[];
    expect(texts[1]).toBe("returned");
    for (const text of texts) {
      expect(text).not.toMatch(/outcomes\.test|node_modules|node:internal|\/src\/|\/dist\/|file:/);
    }
  });
});

describe("a value nested to the codec's limit on a shared worker", () => {
  it.each(["v8", "quickjs"] as const)(
    "fails its own run on %s, never the worker's other tenants",
    async (engine) => {
      const sandbox = await createSandbox({ engine, host: "process", workers: { min: 1, max: 1 } });
      try {
        const victim = await sandbox.prepare({
          code: "export async function slow(n) { await new Promise((r) => setTimeout(r, 300)); return n }",
          partitionKey: "victim",
        });
        const pending = victim.call({ export: "slow", args: [7] });
        const deep = `let v = 1; for (let i = 0; i < 511; i++) v = [v];`;
        const results = await Promise.all([
          sandbox.run({ code: `${deep}\nexport const deep = v; export default 1` }),
          sandbox.run({ code: `${deep}\nexport default () => v` }),
          sandbox.run({ code: `${deep}\nexport default () => { const e = new Error("x"); e.field = v; throw e }` }),
          sandbox.run({ code: `${deep}\nexport default () => { console.log(v); return 1 }` }),
        ]);
        for (const result of results) {
          // Delivered, or refused as data that cannot cross: never the worker's death.
          if (!result.ok) expect(["ERR_NOT_SERIALIZABLE", "ERR_USER_CODE"]).toContain(result.error.code);
        }
        expect(completed(await pending).value).toBe(7);
        await expect(sandbox.prepare({ code: `${deep}\nexport const deep = v;` })).resolves.toBeDefined();
        expect(sandbox.stats().workers?.length).toBe(1);
        expect(completed(await victim.call({ export: "slow", args: [8] })).value).toBe(8);
      } finally {
        await sandbox.dispose();
      }
    },
    30_000,
  );

  it("a result of 48 MB (16 M characters, within the default output limit) crosses without the worker taken for hung", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "process", workers: { min: 1, max: 1 } });
    try {
      const victim = await sandbox.prepare({ code: "export const echo = (n) => n", partitionKey: "victim" });
      const big = sandbox.run({ code: `export default () => "中".repeat(16_000_000)`, limits: { wallTimeMs: 20_000 } });
      const result = completed(await big);
      expect((result.value as string).length).toBe(16_000_000);
      expect(completed(await victim.call({ export: "echo", args: [3] })).value).toBe(3);
      expect(sandbox.stats().workers?.length).toBe(1);
    } finally {
      await sandbox.dispose();
    }
  }, 60_000);
});
