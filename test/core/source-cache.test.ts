import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { transform } from "esbuild";
import { describe, expect, it } from "vitest";
import { decodeMappings, originalPosition } from "../../src/core/source-map.js";
import { cachedSource, normalizeSource } from "../../src/core/source.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const heap = () => {
  gc();
  return process.memoryUsage().heapUsed;
};

describe("normalized sources", () => {
  it("keep line maps encoded, and look positions up as the decoded map did", async () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: guest source text that holds a template literal
    const code = "const a: number = 1;\nexport function f() {\n  return [a, `x${a}`].map((v) => v / 2);\n}\nexport default f;";
    const out = await normalizeSource(code, "enc.ts");
    expect(Array.isArray(out.lineMap)).toBe(false);
    const esb = await transform(`${code}\nexport {};`, { loader: "ts", format: "esm", sourcemap: "external" });
    const decoded = decodeMappings((JSON.parse(esb.map) as { mappings: string }).mappings);
    for (let line = 1; line <= decoded.length; line++) {
      for (const column of [1, 3, 10, 30]) {
        expect(originalPosition(out.lineMap, line, column)).toEqual(originalPosition(decoded, line, column));
      }
    }
    // A wrapped body's first line counts columns from the caller's own start.
    const wrapped = await normalizeSource("const x = input.a; throw new Error(String(x))", "w.ts");
    const line = wrapped.code.split("\n").findIndex((l) => l.includes("throw")) + 1;
    const column = wrapped.code.split("\n")[line - 1].indexOf("throw") + 1;
    expect(originalPosition(wrapped.lineMap, line, column)).toEqual({ line: 1, column: 20 });
  });

  it("the cache holds a bounded number of bytes, whatever the modules' size", async () => {
    // Before: 512 entries of any size, each with both forms and decoded maps: +275 MB of host heap
    // per distinct 0.9 M-character module, until the host ran out of heap.
    const before = heap();
    for (let i = 0; i < 6; i++) {
      const out = await normalizeSource(
        `// ${i} ${Math.random()}\nlet a = 0;\n${"a\n".repeat(450_000)}export default 1`,
        "big.ts",
        {
          timeoutMs: 60_000,
        },
      );
      expect(out.code.length).toBeGreaterThan(0);
    }
    expect(heap() - before).toBeLessThan(160 * 1024 * 1024);
  }, 120_000);

  it("keeps one entry per text and filename, and answers a cached one without waiting", async () => {
    const code = `export default ${Math.random()}`;
    expect(cachedSource(code, "a.ts")).toBeUndefined();
    const a = await normalizeSource(code, "a.ts");
    const b = await normalizeSource(code, "b.ts");
    expect([a.filename, b.filename]).toEqual(["a.ts", "b.ts"]);
    expect(cachedSource(code, "a.ts")).toBe(a);
    expect(cachedSource(code, "b.ts")).toBe(b);
    // A filename is not confused with text: the same characters split differently are another pair.
    expect(cachedSource(`x${code}`, "a.ts")).toBeUndefined();
    // Cached under the caller's text: a hashbang, blanked for the compile, still finds its entry.
    const shebang = `#!/usr/bin/env node\nexport default ${Math.random()}`;
    const first = await normalizeSource(shebang, "s.ts");
    expect(cachedSource(shebang, "s.ts")).toBe(first);
    expect(await normalizeSource(shebang, "s.ts")).toBe(first);
  });

  it("a cached refusal is thrown again, without a compile", async () => {
    const deep = `export default ${"[".repeat(5000)}${"]".repeat(5000)}`;
    const refusal = await normalizeSource(deep, "deep.ts").catch((error: unknown) => error);
    expect((refusal as { code?: string }).code).toBe("ERR_COMPILE");
    expect(() => cachedSource(deep, "deep.ts")).toThrow(refusal as Error);
  });

  it("holds at most 512 entries, counting each filename a text was run under", async () => {
    const code = `export default ${Math.random()}`;
    for (let i = 0; i < 600; i++) await normalizeSource(code, `f${i}.ts`);
    const kept = Array.from({ length: 600 }, (_, i) => cachedSource(code, `f${i}.ts`) !== undefined);
    expect(kept.filter(Boolean).length).toBeLessThanOrEqual(512);
    expect(kept[599]).toBe(true);
    expect(kept[0]).toBe(false);
    // Distinct texts under one filename: the oldest go first.
    const texts = Array.from({ length: 600 }, (_, i) => `export default ${i} + ${Math.random()}`);
    for (const text of texts) await normalizeSource(text, "same.ts");
    expect(cachedSource(texts[0], "same.ts")).toBeUndefined();
    expect(cachedSource(texts[599], "same.ts")).toBeDefined();
    expect(texts.filter((text) => cachedSource(text, "same.ts") !== undefined).length).toBeLessThanOrEqual(512);
  }, 60_000);
});
