import { afterAll, describe, expect, it } from "vitest";
import { Bindings, EMPTY_BINDINGS_TEXT, bindingsFor } from "../../src/core/bindings.js";
import { createSandbox } from "../../src/index.js";

describe("bindings with nothing in them are shared", () => {
  it("a run that binds nothing gets one frozen Bindings; anything bound gets its own", () => {
    const empty = bindingsFor(undefined, Object.create(null), undefined);
    expect(bindingsFor({}, {}, undefined)).toBe(empty);
    expect(empty.text).toBe(EMPTY_BINDINGS_TEXT);
    expect(empty.size).toBe(0);
    expect(Object.isFrozen(empty)).toBe(true);
    expect(() => empty.functions.push({ fn: () => 1, owner: undefined, label: "x" })).toThrow(TypeError);
    // Symbol keys bind nothing (the constructor reads own string keys): shared as well.
    const symbolOnly = { [Symbol("s")]: () => 1 };
    expect(new Bindings(symbolOnly).text).toBe(EMPTY_BINDINGS_TEXT);
    expect(bindingsFor(symbolOnly, {}, undefined)).toBe(empty);

    const withGlobal = bindingsFor({ answer: 42 }, {}, undefined);
    expect(withGlobal).not.toBe(empty);
    expect(bindingsFor({ answer: 42 }, {}, undefined)).not.toBe(withGlobal);
    const withModule = bindingsFor(undefined, { kv: { get: () => 1 } }, undefined);
    expect(withModule.size).toBe(1);
    const fetch = (async () => new Response("")) as never;
    const withFetch = bindingsFor(undefined, {}, fetch);
    expect(withFetch.fetchId).toBe(0);
  });

  const sandboxes = [createSandbox({ engine: "v8", host: "inprocess" }), createSandbox({ engine: "quickjs", host: "inprocess" })];
  afterAll(async () => {
    for (const sandbox of sandboxes) await (await sandbox).dispose();
  });

  it("no run sees another's globals through them, before or after", async () => {
    for (const made of sandboxes) {
      const sandbox = await made;
      const code = "export default () => [typeof secret, typeof globalThis.secret]";
      const before = await sandbox.run({ code });
      const bound = await sandbox.run({ code: "export default () => secret()", globals: { secret: () => "tenant A" } });
      const after = await sandbox.run({ code, globals: {} });
      expect(before.ok && before.value).toEqual(["undefined", "undefined"]);
      expect(bound.ok && bound.value).toBe("tenant A");
      expect(after.ok && after.value).toEqual(["undefined", "undefined"]);
    }
  });
});
