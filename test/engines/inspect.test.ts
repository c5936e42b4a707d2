import { format } from "node:util";
import { describe, expect, it } from "vitest";
import { createInspect } from "../../src/engines/guest/inspect.js";
import { createSandbox } from "../../src/index.js";

describe("log formatting (guest side)", () => {
  it("cuts a line at its cap with the methods captured at creation, whatever replaced them since", () => {
    const format = createInspect();
    const stringSlice = String.prototype.slice;
    const arraySlice = Array.prototype.slice;
    const whole = function (this: unknown) {
      return this;
    };
    try {
      String.prototype.slice = whole as typeof stringSlice;
      Array.prototype.slice = whole as typeof arraySlice;
      expect(format(["x".repeat(100_000)], 100)).toHaveLength(100);
      expect(format(["a", "b".repeat(100_000)], 100)).toHaveLength(100);
      expect(format([Array.from({ length: 500 }, (_, i) => i)], 100_000)).toContain("... 400 more items");
    } finally {
      String.prototype.slice = stringSlice;
      Array.prototype.slice = arraySlice;
    }
  });
});

describe("format specifiers", () => {
  // util.format's rules, which Node's and Deno's console share: before, cordon printed the
  // format string as is and appended the arguments ("%s took %d ms a 3").
  const cases: unknown[][] = [
    ["%s is %d years, %o %j %%", "Ada", 36.6, { a: 1 }, 2],
    ["%i|%f|%c|%O", "42.9x", "1.5", "color:red", [1]],
    ["%s %s", "only one"],
    ["%%"],
    ["100%", 5],
    ["%d %s %d %i", -0, -0, 10n, 10n],
    ["%s %d", Symbol("x"), Symbol("y")],
    ["%s|%s|%s", null, undefined, { toString: () => "custom" }],
    ["%s", { a: { b: 1 } }, "extra", 3],
    ["%j %j", { a: [1] }, undefined],
    ["a%xb %", 1],
    ["x", "%s", 1],
    ["%c%s", "css", "t"],
  ];
  it.each(cases)("formats %j as util.format does", (...args) => {
    expect(createInspect()(args, 10_000)).toBe(format(...args));
  });

  it("keeps a line's cap, and a %j of a cycle names it", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const fmt = createInspect();
    expect(fmt(["%s".repeat(10), "x".repeat(100)], 50)).toHaveLength(50);
    expect(fmt(["%s", "y".repeat(1_000_000)], 100)).toHaveLength(100);
    expect(fmt(["%j", cyclic], 100)).toBe("[Circular]");
  });

  it.each(["v8", "quickjs"] as const)("applies on %s", async (engine) => {
    await using sandbox = await createSandbox({ engine, host: "inprocess" });
    const result = await sandbox.run({
      code: `export default () => { console.log("%s took %d ms (%i%%)", "build", 12.5, "99.9"); }`,
    });
    expect(result.logs.map((l) => l.message)).toEqual(["build took 12.5 ms (99%)"]);
  });

  it.each(["v8", "quickjs"] as const)(
    "applies to console.assert's message on %s (the Console spec's prefixing)",
    async (engine) => {
      await using sandbox = await createSandbox({ engine, host: "inprocess" });
      const result = await sandbox.run({
        code: `export default () => { console.assert(false, "%s failed", "thing"); console.assert(0, { a: 1 }); console.assert(false); console.assert(true, "never"); }`,
      });
      expect(result.logs.map((l) => [l.level, l.message])).toEqual([
        ["error", "Assertion failed: thing failed"],
        ["error", "Assertion failed { a: 1 }"],
        ["error", "Assertion failed"],
      ]);
    },
  );
});

describe("objects, as Node's console prints them", () => {
  // why: accessors were called (a getter that logged `this` recursed until the stack overflowed)
  // and containers were expanded four levels deep, where Node stops at two.
  const accessors = {
    get a() {
      return 1;
    },
    set b(_: unknown) {},
    get c() {
      return 2;
    },
    set c(_: unknown) {},
    d: 4,
  };
  const cases: unknown[][] = [
    [accessors],
    [{ a: { b: { c: { d: 1 } } } }, [1, [2, [3, [4]]]]],
    [{ a: { b: { c: {} } } }, [[[[]]]]],
    ["%O", { c: { d: { e: { f: 1 } } } }],
  ];
  it.each(cases)("prints %o as util.format does", (...args) => {
    expect(createInspect()(args, 10_000)).toBe(format(...args));
  });

  it("calls no getter", () => {
    let calls = 0;
    const watched = {
      get a() {
        calls++;
        return 1;
      },
    };
    expect(createInspect()([watched, { inner: watched }], 1_000)).toBe("{ a: [Getter] } { inner: { a: [Getter] } }");
    // An array's index too (it logged itself from its getter: 1,001 lines).
    const list = [0, 2];
    Object.defineProperty(list, 0, {
      get() {
        calls++;
        return 1;
      },
      enumerable: true,
    });
    expect(createInspect()([list], 1_000)).toBe(format(list));
    expect(calls).toBe(0);
  });

  it("prints a Proxy past the depth as an object when its ownKeys trap throws", () => {
    // Its keys are read only to print an empty object whole: a throw there made the level above
    // [Uninspectable].
    const throwing = new Proxy(
      {},
      {
        ownKeys: () => {
          throw new Error("trap");
        },
      },
    );
    expect(createInspect()([{ a: { b: { c: throwing } } }], 1_000)).toBe("{ a: { b: { c: [Object] } } }");
  });
});
