import { runInNewContext } from "node:vm";
import { transform } from "esbuild";
import { describe, expect, it } from "vitest";
import { EXPORTS_NAME, HELPERS_PARAM, scriptFactory, shareHelpers } from "../../src/core/script-helpers.js";
import { nestsDeeperThan } from "../../src/core/nesting.js";
import { remapStack } from "../../src/core/source-map.js";
import { normalizeSource } from "../../src/core/source.js";
import { esbuildServices } from "../helpers/processes.js";

describe("guest source", () => {
  it("remaps a file's frames only where the name stands alone, not inside a longer name", () => {
    // Line 4 of the generated code is line 25 of the caller's text.
    const map = [[], [], [], [0, 24, 0]];
    const stack = "Error\n    at f (mylib:4:1)\n    at g (a/lib:4:1)\n    at h (lib:4:1)\n    at lib:4:1";
    expect(remapStack(stack, "lib", map)).toBe(
      "Error\n    at f (mylib:4:1)\n    at g (a/lib:4:1)\n    at h (lib:25:1)\n    at lib:25:1",
    );
    // Nor as the start of a name that goes on with `:digits`: `lib:1:4:1` is line 4 of "lib:1"
    // (QuickJS named it line 8, remapped through both maps).
    expect(remapStack("Error\n    at f (lib:1:4:1)\n    at lib:1:4:7", "lib", map)).toBe(
      "Error\n    at f (lib:1:4:1)\n    at lib:1:4:7",
    );
  });

  it("the script form keeps what the module form runs: no tree shaking of pure-annotated calls", async () => {
    const out = await normalizeSource(
      "let n = 0; const bump = () => ++n; const unused = /* @__PURE__ */ bump(); export default () => n;",
    );
    expect(out.script?.code).toContain("bump()");
  });

  it("refuses code nested past 1000 levels before esbuild sees it (its output grows with the square of the depth)", async () => {
    // 40 KB of nested blocks came back from esbuild as more than 536 M characters, and its client
    // threw where nothing could catch it: the host process exited.
    const blocks = `export default () => {${"{".repeat(20_000)}${"}".repeat(20_000)} return 1 }`;
    const started = performance.now();
    await expect(normalizeSource(blocks)).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/more than 1000 levels/),
    });
    expect(performance.now() - started).toBeLessThan(1000);
    // Nested arrows cost esbuild seconds (20,000: 12 s); 100,000 overflowed its stack.
    const arrows = `export default ${"(() => ".repeat(2000)}1${")".repeat(2000)};`;
    await expect(normalizeSource(arrows)).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/more than 1000 levels/),
    });
    // Depth inside a template substitution counts; brackets in strings, templates and comments do not.
    expect(nestsDeeperThan(`\`${"${[".repeat(600)}${"]}".repeat(600)}\``)).toBe(true);
    expect(
      nestsDeeperThan(
        `const s = "${"{".repeat(5000)}"; const t = '${"(".repeat(5000)}'; const u = \`${"[".repeat(5000)}\`; /* ${"{".repeat(5000)} */ // ${"(".repeat(5000)}`,
      ),
    ).toBe(false);
    expect(nestsDeeperThan(`x = \`a\${ { b: \`\${ [1] }\` } }c\`; ${"(".repeat(900)}${")".repeat(900)}`)).toBe(false);
    const deepButFine = `export default () => ${"[".repeat(900)}1${"]".repeat(900)};`;
    expect((await normalizeSource(deepButFine)).wrapped).toBe(false);
  });

  it("strips TypeScript and keeps modules as modules", async () => {
    const out = await normalizeSource("const n: number = 2; export default n as number;");
    expect(out.wrapped).toBe(false);
    expect(out.code).not.toContain(": number");
  });

  it("keeps non-ASCII text as it is in both forms (esbuild's default escaped each character into six)", async () => {
    const text = "一二三四五六七八九十".repeat(1000);
    const out = await normalizeSource(`const café = "${text}"; export default () => café.length;`);
    for (const compiled of [out.code, out.script?.code ?? ""]) {
      expect(compiled).toContain(text);
      expect(compiled).toContain("café");
      expect(compiled.length).toBeLessThan(text.length + 2000);
    }
  });
  it("wraps a function body with a top-level return, decided by the parser", async () => {
    const out = await normalizeSource("const x = input.a; return x * 2");
    expect(out.wrapped).toBe(true);
    expect(out.code).toMatch(/async function \w*\(input\)/);
    expect(out.code).toMatch(/export \{[^}]*as default/);
  });

  it("does not wrap text that merely mentions return", async () => {
    const out = await normalizeSource('export default function f() { return "return"; }\n// return');
    expect(out.wrapped).toBe(false);
  });

  it("reports syntax errors as ERR_COMPILE with file, line and column", async () => {
    await expect(normalizeSource("const a = ;\nexport default a", "tenant.ts")).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/^tenant\.ts:1:\d+: /),
    });
  });

  it("an unclosed construct is reported at the caller's end, never as cordon's appended `export {}` or closing brace", async () => {
    // Before: `<guest>:2:1: Unexpected "export"` for one line of code.
    const cases: [string, string, string][] = [
      ["export default function () {", "m.ts", "m.ts:1:29: Unexpected end of file"],
      ["const x = 1;\nexport default x +", "m.js", "m.js:2:19: Unexpected end of file"],
      ["/* open", "m.ts", 'm.ts:1:8: Expected "*/" to terminate multi-line comment'],
      // Wrapped bodies: the wrap's closing brace is not named either, and line 1 keeps its columns.
      ["return (1 + ", "b.ts", "b.ts:1:13: Unexpected end of file"],
      ["const a = 1;\nreturn [", "b.ts", "b.ts:2:9:"],
    ];
    for (const [code, filename, message] of cases) {
      const error = await normalizeSource(code, filename).then(
        () => undefined,
        (e: unknown) => e as { code: string; message: string },
      );
      expect(error?.code).toBe("ERR_COMPILE");
      expect(error?.message.startsWith(message)).toBe(true);
      expect(error?.message).not.toMatch(/export|"\}"/);
    }
    // An error inside the caller's lines is untouched.
    await expect(normalizeSource("return 1 }", "c.ts")).rejects.toMatchObject({ message: 'c.ts:1:10: Unexpected "}"' });
  });

  it("the script form takes esbuild's helpers from the runtime, line for line (this esbuild prints them as expected)", async () => {
    const out = await normalizeSource("export const a = 1;\nexport default function f() { return a }");
    const script = out.script?.code ?? "";
    // An arrow (a module's top level has no `arguments`) whose body is the IIFE's: no IIFE of its own.
    expect(script.startsWith(`((${HELPERS_PARAM}) => {`)).toBe(true);
    expect(script).not.toContain(EXPORTS_NAME);
    expect(script.endsWith("  return __toCommonJS(guest_exports);\n})")).toBe(true);
    // Only the helpers the module uses are declared.
    expect(script).toContain(`var __export = ${HELPERS_PARAM}.__export, __toCommonJS = ${HELPERS_PARAM}.__toCommonJS;\n`);
    expect(script).not.toContain("__getOwnPropDesc");
    expect(script).not.toContain("Object.defineProperty");
    // Every line keeps its number (the helpers' lines are kept, empty): the wrapper adds one.
    const iife = await transform("export const a = 1;\nexport default function f() { return a }\nexport {};", {
      format: "iife",
      globalName: EXPORTS_NAME,
      target: "esnext",
    });
    const lineOf = (text: string) => text.split("\n").findIndex((line) => line.includes("return a"));
    expect(lineOf(script)).toBe(lineOf(iife.code) + 1);
    const lineMap = out.script?.lineMap;
    const mapped = Array.isArray(lineMap) ? lineMap.length : (lineMap?.mappings.split(";").length ?? 0);
    expect(script.split("\n").length).toBeGreaterThanOrEqual(mapped);
  });

  it("makes the script form's arrow of an IIFE it does not recognise too: that IIFE runs inside it as written", () => {
    const evaluate = (code: string) => runInNewContext(code) as (helpers: object) => unknown;
    const odd = `var ${EXPORTS_NAME} = (() => {\n  return { a: 1, args: typeof arguments };\n})();\n// trailing\n`;
    expect(scriptFactory(odd)).toContain(odd);
    expect(evaluate(scriptFactory(odd))({})).toEqual({ a: 1, args: "undefined" });
    const usual = `var ${EXPORTS_NAME} = (() => {\n  return { a: 2, args: typeof arguments };\n})();\n`;
    expect(scriptFactory(usual)).not.toContain(EXPORTS_NAME);
    expect(scriptFactory(usual).split("\n").length).toBe(usual.split("\n").length);
    expect(evaluate(scriptFactory(usual))({})).toEqual({ a: 2, args: "undefined" });
  });

  it("leaves text it does not recognise exactly as esbuild wrote it", () => {
    const odd = `var ${EXPORTS_NAME} = (() => {\n  var __defProp = Object.defineProperty; // changed\n  return {};\n})();\n`;
    expect(shareHelpers(odd)).toBe(odd);
    expect(shareHelpers("something else")).toBe("something else");
  });

  it("survives esbuild's service process being killed: the next module compiles, and no failure is remembered", async () => {
    await normalizeSource("export default 1 as number;");
    const services = esbuildServices();
    expect(services.length).toBeGreaterThan(0);
    for (const { pid } of services) process.kill(pid, "SIGKILL");
    await new Promise((resolve) => setTimeout(resolve, 100));
    const out = await normalizeSource(`const fresh: string = "${Math.random()}"; export default fresh;`);
    expect(out.code).toContain("fresh");
    // A genuine compile error is still ERR_COMPILE.
    await expect(normalizeSource("export default (;")).rejects.toMatchObject({ code: "ERR_COMPILE" });
  });
});
