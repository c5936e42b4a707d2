import variant from "@jitl/quickjs-wasmfile-release-sync";
import { newQuickJSWASMModuleFromVariant, type QuickJSContext, type QuickJSSyncVariant } from "quickjs-emscripten-core";
import { describe, expect, it } from "vitest";
import { installSeededRandom } from "../../src/engines/quickjs/seeded-random.js";
import { createSandbox } from "../../src/index.js";

/** A fresh QuickJS context (its own WebAssembly instance, as cordon makes them) with `seed` installed. */
async function seeded(seed: number[]): Promise<QuickJSContext> {
  // The package's default export is the variant (its typings describe the module namespace).
  const module = await newQuickJSWASMModuleFromVariant(variant as unknown as QuickJSSyncVariant);
  const vm = module.newContext();
  vm.unwrapResult(vm.evalCode(`(${installSeededRandom.toString()})(globalThis, ${JSON.stringify(seed)})`)).dispose();
  return vm;
}

function evaluate(vm: QuickJSContext, code: string): unknown {
  const handle = vm.unwrapResult(vm.evalCode(code));
  const value = vm.dump(handle);
  handle.dispose();
  return value;
}

const SEQUENCE = "Array.from({ length: 8 }, () => Math.random())";

describe("QuickJS Math.random", () => {
  // why: QuickJS seeds Math.random from the clock in milliseconds, so two instances made in the
  // same millisecond shared one sequence (14 of 20 pairs made back to back): one tenant could
  // know another's values. Each instance is seeded from the host's CSPRNG instead.
  it("follows its seed: the same seed gives the same sequence, another seed another", async () => {
    const [a, b, c] = await Promise.all([seeded([1, 2, 3, 4]), seeded([1, 2, 3, 4]), seeded([1, 2, 3, 5])]);
    const [sa, sb, sc] = [a, b, c].map((vm) => evaluate(vm, SEQUENCE) as number[]);
    expect(sa).toEqual(sb);
    expect(sc.some((v, i) => v !== sa[i])).toBe(true);
    expect(new Set(sa).size).toBe(8);
    for (const vm of [a, b, c]) vm.dispose();
  });

  it("returns doubles in [0, 1) with a plausible spread, from the all-zero seed too", async () => {
    for (const seed of [
      [0, 0, 0, 0],
      [0xdeadbeef, 0x12345678, 0x9abcdef0, 0x0fedcba9],
    ]) {
      const vm = await seeded(seed);
      const stats = evaluate(
        vm,
        `(() => { let min = 1, max = 0, sum = 0, n = 20000; for (let i = 0; i < n; i++) { const v = Math.random(); min = Math.min(min, v); max = Math.max(max, v); sum += v } return [min, max, sum / n] })()`,
      ) as number[];
      expect(stats[0]).toBeGreaterThanOrEqual(0);
      expect(stats[1]).toBeLessThan(1);
      expect(stats[2]).toBeGreaterThan(0.48);
      expect(stats[2]).toBeLessThan(0.52);
      vm.dispose();
    }
  });

  it("is shaped like the builtin: a writable, non-enumerable method named random, not a constructor", async () => {
    const vm = await seeded([5, 6, 7, 8]);
    expect(
      evaluate(
        vm,
        `(() => { const d = Object.getOwnPropertyDescriptor(Math, "random"); let constructs = true; try { new Math.random() } catch (e) { constructs = !(e instanceof TypeError) } return [d.writable, d.enumerable, d.configurable, Math.random.name, Math.random.length, constructs] })()`,
      ),
    ).toEqual([true, false, true, "random", 0, false]);
    vm.dispose();
  });

  it("returns the function that seeds it again (instances copied from one template's memory use it)", async () => {
    const module = await newQuickJSWASMModuleFromVariant(variant as unknown as QuickJSSyncVariant);
    const [a, b] = [module.newContext(), module.newContext()];
    const reseedA = a.unwrapResult(a.evalCode(`(${installSeededRandom.toString()})(globalThis, [1, 2, 3, 4])`));
    b.unwrapResult(b.evalCode(`(${installSeededRandom.toString()})(globalThis, [9, 9, 9, 9])`)).dispose();
    const before = evaluate(a, SEQUENCE);
    const seed = [9, 9, 9, 9].map((n) => a.newNumber(n));
    a.unwrapResult(a.callFunction(reseedA, a.undefined, ...seed)).dispose();
    for (const handle of [...seed, reseedA]) handle.dispose();
    expect(evaluate(a, SEQUENCE)).toEqual(evaluate(b, SEQUENCE));
    expect(evaluate(a, SEQUENCE)).not.toEqual(before);
    a.dispose();
    b.dispose();
  });

  it("each instance of the quickjs engine has a sequence of its own", async () => {
    await using sandbox = await createSandbox({ engine: "quickjs", host: "inprocess", spareInstances: 4 });
    const runs = await Promise.all(Array.from({ length: 12 }, () => sandbox.run({ code: `export default () => ${SEQUENCE}` })));
    const firsts = runs.map((r) => {
      if (!r.ok) throw new Error(r.error.message);
      return (r.value as number[])[0];
    });
    expect(new Set(firsts).size).toBe(12);
  });
});
