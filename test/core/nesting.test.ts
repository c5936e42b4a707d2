import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { MAX_OUTPUT_ESTIMATE, nestsDeeperThan, scanNesting } from "../../src/core/nesting.js";

const deep = (n = 2000) => `${"(".repeat(n)}1${")".repeat(n)}`;
const blocks = (n = 2000) => `${"{".repeat(n)}${"}".repeat(n)}`;

describe("the nesting scan", () => {
  it("a regular expression's quote, backtick or slash hides nothing from the depth count", () => {
    // Before: `/"/` opened a "string" to the end of the line and `/`/` a template to the next backtick.
    const hiding = [
      `const re = /"/; export default ${deep()}`,
      `let re; re = /'/; ${blocks()}`,
      `const re = /\`/;\n${blocks()}\n// \``,
      `const re = /[/"]/; ${blocks()}`,
      `const re = /\\/"/; ${blocks()}`,
      `if (a) /"/.test(b); ${blocks()}`,
      `function f() { return /"/.test(s) && ${deep()} }`,
      `x = y => /"/; ${deep()}`,
      `x = a ? /'/ : ${deep()}`,
      // A comment ends at U+2028 for esbuild too.
      `// note\u2028${blocks()}`,
      `/* "\` */ ${blocks()}`,
    ];
    for (const code of hiding) expect(scanNesting(code), code.slice(0, 40)).toEqual({ kind: "deep" });
  });

  it("a division read as a regular expression hides nothing either", () => {
    const hiding = [
      `x = (a) / 2; y = "/"; ${deep()}`,
      `x = (a) / 2 + \`/\`; ${blocks()}\n\`\``,
      `x = {}.a / 2, "/" + ${deep()}`,
      `x = a++ / 2 + "/"; ${deep()}`,
      `x = a.return / 2 / "/"; ${deep()}`,
      `x = a! / 2; y = '/'; ${deep()}`,
      `x = café / 2; y = "/"; ${deep()}`,
      `x = [a] / 2; y = "/"; ${deep()}`,
    ];
    for (const code of hiding) expect(scanNesting(code), code.slice(0, 40)).toEqual({ kind: "deep" });
  });

  it("counts the nesting esbuild adds without brackets: brace-less ifs and do bodies", () => {
    // esbuild braces and indents nested `if`s: 10 KB of `if(a)` came back as 8 M characters.
    expect(scanNesting(`${"if(a)".repeat(20_000)}x;`)).toEqual({ kind: "deep" });
    expect(scanNesting(`${"do ".repeat(20_000)}x;${"while(a);".repeat(20_000)}`)).toEqual({ kind: "deep" });
    expect(scanNesting(`${"for(;;)if(a)".repeat(600)}x;`)).toEqual({ kind: "deep" });
  });

  it("refuses text whose output would be too large: many blocks nested to just under the cap", () => {
    // 280 blocks 1000 deep (560 KB) came back as more than 536 M characters and the host exited.
    const verdict = scanNesting(`${`${blocks(1000)}\n`.repeat(280)}export default 1`);
    expect(verdict?.kind).toBe("large");
    // Ten of them are fine (about 20 M characters of output).
    expect(scanNesting(`${`${blocks(1000)}\n`.repeat(10)}export default 1`)).toBeUndefined();
    expect(MAX_OUTPUT_ESTIMATE).toBeGreaterThan(16 * 1024 * 1024 * 8);
  });

  it("does not refuse ordinary code: regular expressions with quotes and brackets, divisions, comments, templates", () => {
    const line = [
      `const a = /["'\`]/g, b = /[(){}[\\]]/, c = /\\(/, d = /{/, e = /[/]/;`,
      "const h = (a + b) / 2, q = total / count / 3, r = x++ / 2, s = f() / g();",
      `if (a) /"/.test(b); else b = c / d;`,
      "// it's a comment with a ` backtick and a ( bracket",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: guest source text that holds a template literal
      '/* a "quoted" ( { [ block */ const t = `a${b ? `c${d}` : "}"}e`;',
      'const u = "// not a comment /* nor this", v = \'/"/\';',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: guest source text that holds a template literal
      "const w = `line\n${[1, 2].map((x) => x / 2)}\nmore`;",
      "export default function (x: number): number { return x / 2 }",
      'switch (x) { case 1: y = /"/; break; default: y = 2 / 3; }',
      "do { x-- } while (x / 2 > 1);",
    ].join("\n");
    // Thousands of lines: nothing accumulates.
    const many = `${line}\n`.repeat(3000);
    expect(scanNesting(many)).toBeUndefined();
    expect(scanNesting(`${"(".repeat(900)}/"/${")".repeat(900)}`)).toBeUndefined();
    expect(nestsDeeperThan(`x = \`a\${ { b: \`\${ [1] }\` } }c\`; ${"(".repeat(900)}${")".repeat(900)}`)).toBe(false);
    // Text esbuild will refuse anyway (JSX is not enabled) is not refused by the scan.
    expect(scanNesting("const x = <div>it's</div>;\nexport default x;")).toBeUndefined();
  });

  it("refuses at once text that makes every reading's work count over and over", () => {
    // Each `(a)/` forks a regular-expression reading that dies at its line's end (the `[` of
    // `"["` opens a class no `]` closes): 512 KB held the host's thread 44 s, uncounted.
    const rereads = `x=${'(a)/"["+'.repeat(64_000)}0;`;
    // 1,000 levels deep, each `a++/1/` copied 3,000 counts into a fork: 16 MiB took 26 s.
    const copies = `${"[".repeat(995)}${"a++/1/".repeat(2_796_000)}`;
    // Two readings at one place, ~950 template substitutions deep, that cannot merge: they went on
    // a step each in turn, comparing their substitutions every step (24 s for 2 MiB), uncounted.
    let forks = "";
    for (let j = 1; j <= 4; j++) forks += `a++/}\`${")".repeat(j)}\`\${${"(".repeat(j)}a/ `;
    const lockstep = `${"`${".repeat(950)}${forks}`.padEnd(2 * 1024 * 1024, " ");
    for (const code of [rereads, copies, lockstep]) {
      const started = performance.now();
      expect(scanNesting(code)).toEqual({ kind: "ambiguous" });
      expect(performance.now() - started).toBeLessThan(5_000);
    }
    // The same divisions with the `]` real code has somewhere on the line are read, not refused.
    expect(scanNesting(`x=${'(a)/2+"["+b[0]+'.repeat(20_000)}0;`)).toBeUndefined();
  });

  it("does not refuse real libraries, and scans them quickly", () => {
    const require = createRequire(import.meta.url);
    for (const name of ["typescript", "zod", "esbuild"]) {
      const code = readFileSync(require.resolve(name), "utf8");
      const started = performance.now();
      expect(scanNesting(code), name).toBeUndefined();
      expect(performance.now() - started, name).toBeLessThan(5_000);
    }
  });
});

describe("normalizeSource and the scan", () => {
  it("refuses, with ERR_COMPILE and a reason, before esbuild sees it", async () => {
    const { normalizeSource } = await import("../../src/core/source.js");
    const started = performance.now();
    await expect(
      normalizeSource(`const re = /"/; export default ${"() => (".repeat(100_000)}1${")".repeat(100_000)}`),
    ).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/more than 1000 levels/),
    });
    await expect(normalizeSource(`${`${blocks(1000)}\n`.repeat(280)}export default 1`)).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/too large .*nest less deeply or split the module/),
    });
    expect(performance.now() - started).toBeLessThan(10_000);
  });
});
