import { readFileSync } from "node:fs";
import vm from "node:vm";
import variant from "@jitl/quickjs-wasmfile-release-sync";
import { newQuickJSWASMModuleFromVariant, type QuickJSSyncVariant } from "quickjs-emscripten-core";
import { describe, expect, it } from "vitest";
import { codecSource } from "../../src/core/codec.js";

/**
 * The guest codec's output, byte for byte, on adversarial values: getters that answer differently
 * each read, Proxies counting their traps, "$" and __proto__ and NUL keys, sparse arrays, deep
 * nesting, limits hit at a key or a value, an encode inside a getter. `expected` was written by
 * the encoder before its walk was restructured for speed (its functions made once, not per
 * encode): text, error code, path and message, how many reads the value saw, and encodeError's
 * lenient text must all stay what they were.
 */
interface GoldenCase {
  expr: string;
  limit?: number;
  expected: unknown;
}
const cases = JSON.parse(readFileSync(new URL("../fixtures/codec-encode-golden.json", import.meta.url), "utf8")) as GoldenCase[];

// Runs in the guest realm: `reads` is what the case's getters and traps count.
const runner = `(expr, limit) => {
  globalThis.reads = 0;
  const v = (0, eval)(expr);
  const before = reads;
  let r;
  try {
    r = { out: limit === undefined ? codec.encode(v, "value", undefined, false) : codec.encode(v, "value", limit, false) };
  } catch (e) {
    r = { err: String(e.code) + " " + String(e.path) + " " + String(e.message), own: codec.threw(e) };
  }
  r.reads = reads - before;
  let le;
  try { le = codec.encodeError(v, false) } catch (e) { le = "throws " + e.message }
  r.lenient = le;
  return JSON.stringify(r);
}`;
const setup = `globalThis.codec = (${codecSource()})(false); globalThis.run = ${runner}; 0`;
const call = (c: GoldenCase) => `run(${JSON.stringify(c.expr)}, ${c.limit ?? "undefined"})`;

describe("the guest codec writes what it wrote before, byte for byte", () => {
  it("in a V8 realm", () => {
    const realm = vm.createContext({});
    vm.runInContext(setup, realm);
    for (const c of cases)
      expect({ expr: c.expr, got: JSON.parse(vm.runInContext(call(c), realm)) }).toEqual({ expr: c.expr, got: c.expected });
  });

  it("in a QuickJS context", async () => {
    const QuickJS = await newQuickJSWASMModuleFromVariant(variant as unknown as QuickJSSyncVariant);
    const context = QuickJS.newContext();
    try {
      context.unwrapResult(context.evalCode(setup)).dispose();
      for (const c of cases) {
        const handle = context.unwrapResult(context.evalCode(call(c)));
        const got = JSON.parse(context.getString(handle));
        handle.dispose();
        expect({ expr: c.expr, got }).toEqual({ expr: c.expr, got: c.expected });
      }
    } finally {
      context.dispose();
    }
  });

  it("keys come out the same whether their text was kept from an earlier encode or not", () => {
    const realm = vm.createContext({});
    vm.runInContext(setup, realm);
    // More distinct keys than the codec keeps, some too long to keep, "__proto__", each encoded twice.
    const check = `(() => {
      const o = JSON.parse('{"__proto__":"p"}'); o[String.fromCharCode(0)] = "z";
      for (let i = 0; i < 1500; i++) o["k" + i + (i % 7 === 0 ? "x".repeat(70) : "")] = "v" + i;
      const first = codec.encode(o), second = codec.encode(o), again = codec.encode(JSON.parse(JSON.stringify(o)));
      return first === JSON.stringify(o) && second === first && again === first;
    })()`;
    expect(vm.runInContext(check, realm)).toBe(true);
  });
});
