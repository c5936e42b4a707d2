import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { completed } from "./results.js";

/**
 * A binding named "__proto__" (as JSON.parse makes one: an own key) is a binding like any other.
 * Gathered into a plain object on the host it was an assignment to the object's prototype: a source
 * import so named was dropped (the run failed with ERR_MODULE_NOT_FOUND, saying it was not passed),
 * a host module so named replaced the prototype of the record of host modules.
 */
describe.each(COMBINATIONS)("bindings named __proto__ on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it("a source import named __proto__ is imported, beside one named constructor", async () => {
    const result = completed(
      await sandbox.run({
        code: "import x from '__proto__'; import y from 'constructor'; export default () => [x, y]",
        imports: JSON.parse('{"__proto__": "export default 5", "constructor": "export default 6"}'),
      }),
    );
    expect(result.value).toEqual([5, 6]);
  });

  it("a host module named __proto__, and a function under a key named __proto__, are called", async () => {
    // An own "__proto__" key (JSON.parse makes one), then a function put in its place.
    const inner = JSON.parse('{"__proto__": 0}');
    Object.defineProperty(inner, "__proto__", { value: async () => "deep", enumerable: true });
    const module = { f: async () => 7, k: 8, inner };
    const imports = JSON.parse('{"__proto__": 0}');
    Object.defineProperty(imports, "__proto__", { value: module, enumerable: true });
    const result = completed(
      await sandbox.run({
        code: `import m from '__proto__';
          export default async () => [await m.f(), m.k, await Object.getOwnPropertyDescriptor(m.inner, "__proto__").value()]`,
        imports,
      }),
    );
    expect(result.value).toEqual([7, 8, "deep"]);
  });

  it("a global named __proto__ is the guest's own global, and the global object's prototype is untouched", async () => {
    const result = completed(
      await sandbox.run({
        code: `export default () => [Object.getOwnPropertyDescriptor(globalThis, "__proto__")?.value,
          Object.getPrototypeOf(globalThis) !== null && typeof Object.getPrototypeOf(globalThis) === "object"]`,
        globals: JSON.parse('{"__proto__": {"admin": true}}'),
      }),
    );
    expect(result.value).toEqual([{ admin: true }, true]);
  });
});
