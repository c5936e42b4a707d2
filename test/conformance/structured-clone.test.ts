import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS, differs } from "./matrix.js";
import { completed } from "./results.js";

/**
 * `structuredClone` follows the HTML structured clone algorithm on every engine (Deno's is its
 * own; v8's and quickjs's is cordon's, src/engines/guest/structured-clone.ts). Before, v8 and
 * quickjs copied through the value codec: cycles refused, shared references split, RegExps
 * refused, `transfer` ignored, a Response copied.
 */
describe.each(COMBINATIONS)("structuredClone on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  const run = async (body: string) => completed(await sandbox.run({ code: `export default () => { ${body} }` })).value;

  it("keeps cycles and shared references, and copies every cloneable kind", async () => {
    const value = await run(`
      const shared = { n: 1 };
      const o = { a: shared, b: shared, list: [1, , 3], when: new Date(5), re: /x+/gi, big: 10n,
        boxed: [new Number(2), new String("s"), new Boolean(false), Object(3n)],
        map: new Map([[shared, "v"]]), set: new Set([shared]), bytes: new Uint16Array([1, 2, 3]).subarray(1),
        view: new DataView(new ArrayBuffer(8), 2, 4), neg: -0, nan: NaN };
      o.self = o;
      const c = structuredClone(o);
      return {
        distinct: c !== o && c.a !== shared,
        shared: c.a === c.b && c.map.keys().next().value === c.a && c.set.has(c.a),
        cycle: c.self === c,
        hole: !(1 in c.list) && c.list.length === 3,
        date: c.when instanceof Date && c.when.getTime() === 5,
        re: c.re instanceof RegExp && c.re.source === "x+" && c.re.flags === "gi",
        big: c.big === 10n,
        boxed: c.boxed.map((b) => [typeof b, b.valueOf()]),
        bytes: [c.bytes instanceof Uint16Array, Array.from(c.bytes), c.bytes.byteOffset, c.bytes.buffer.byteLength],
        view: [c.view instanceof DataView, c.view.byteOffset, c.view.byteLength],
        neg: Object.is(c.neg, -0) && Number.isNaN(c.nan),
      };`);
    expect(value).toEqual({
      distinct: true,
      shared: true,
      cycle: true,
      hole: true,
      date: true,
      re: true,
      big: true,
      boxed: [
        ["object", 2],
        ["object", "s"],
        ["object", false],
        ["object", 3n],
      ],
      bytes: [true, [2, 3], 2, 6],
      view: [true, 2, 4],
      neg: true,
    });
  });

  it("copies errors by their standard name, with message and cause; class instances become plain objects", async () => {
    const value = await run(`
      class Point { constructor() { this.x = 1 } get y() { return 2 } }
      const e = structuredClone(new RangeError("far", { cause: { why: 1 } }));
      const custom = structuredClone(Object.assign(new Error("m"), { name: "MyError" }));
      const p = structuredClone(new Point());
      return [e instanceof RangeError, e.name, e.message, e.cause, custom.name, Object.getPrototypeOf(p) === Object.prototype, p];`);
    expect(value).toEqual([true, "RangeError", "far", { why: 1 }, "Error", true, { x: 1 }]);
  });

  it('an error without a message of its own stays so: message "" (inherited) and writable', async () => {
    // Before, v8's and quickjs's copy got an own `message` of undefined, read-only and fixed.
    const value = await run(`
      const e = structuredClone(new Error());
      const own = Object.getOwnPropertyDescriptor(e, "message");
      e.message = "set later";
      const m = structuredClone(new TypeError("kept"));
      return [own === undefined, e.message, m.message, Object.getOwnPropertyDescriptor(m, "message")];`);
    expect(value).toEqual([true, "set later", "kept", { value: "kept", writable: true, enumerable: false, configurable: true }]);
  });

  it("refuses what cannot be cloned with a DataCloneError, and leaves nothing half-done", async () => {
    const value = await run(`
      const names = [];
      for (const bad of [() => 1, { f() {} }, Symbol("s"), new Response("x"), new Headers(), new URL("https://a.test/"), Promise.resolve(), new WeakMap()]) {
        try { structuredClone(bad); names.push("cloned") } catch (e) { names.push(e.name) }
      }
      return names;`);
    expect(value).toEqual(Array(8).fill("DataCloneError"));
  });

  it("does not use what the guest patched on the builtins' prototypes", async () => {
    const value = await run(`
      const value = { m: new Map([[1, 2]]), s: new Set([3]), d: new Date(9), k: 4 };
      const size = Object.getOwnPropertyDescriptor(Map.prototype, "size").get;
      const setSize = Object.getOwnPropertyDescriptor(Set.prototype, "size").get;
      const valueOf = Date.prototype.valueOf;
      Map.prototype.set = Map.prototype.get = Map.prototype.forEach = Set.prototype.add = () => { throw new Error("patched") };
      Object.keys = () => [];
      Date.prototype.getTime = () => 0;
      const c = structuredClone(value);
      return [size.call(c.m), setSize.call(c.s), valueOf.call(c.d), c.k];`);
    expect(value).toEqual([1, 1, 9, 4]);
  });

  it("transfer moves an ArrayBuffer (or says this engine cannot)", async () => {
    const value = await run(`
      const b = new Uint8Array([7, 8]).buffer;
      try {
        const c = structuredClone({ b }, { transfer: [b] });
        return ["moved", b.byteLength, Array.from(new Uint8Array(c.b))];
      } catch (e) { return [e.name, e.message, b.byteLength] }`);
    if (differs(combo, "clone-transfer"))
      expect(value).toEqual([
        "DataCloneError",
        "structuredClone: this engine cannot transfer (detach) an ArrayBuffer; clone without transfer",
        2,
      ]);
    else expect(value).toEqual(["moved", 0, [7, 8]]);
  });

  it("is bounded by the run's memory limit (a clone is made in the guest's own heap)", async () => {
    const result = await sandbox.run({
      code: `export default () => { const a = new Array(1 << 20).fill("x".repeat(16)); const all = []; for (;;) all.push(structuredClone(a)); }`,
      limits: { memoryMb: 32, wallTimeMs: 20_000, cpuTimeMs: 20_000 },
    });
    expect(result.ok ? "completed" : result.error.code).toBe("ERR_MEMORY_LIMIT");
  });
});
