import { describe, expect, it } from "vitest";
import { scanJson } from "../../src/executor/json-scan.js";

/** What JSON.parse says of `text`: the kind scanJson must answer, or undefined when it throws. */
function parsedKind(text: string): "array" | "object" | "scalar" | undefined {
  try {
    const value: unknown = JSON.parse(text);
    if (Array.isArray(value)) return "array";
    return value !== null && typeof value === "object" ? "object" : "scalar";
  } catch {
    return undefined;
  }
}

const CASES = [
  "",
  " ",
  "null",
  " null ",
  "nul",
  "nulll",
  "true",
  "false",
  "tru",
  "0",
  "-0",
  "01",
  "-",
  "1.",
  ".5",
  "1.5e+3",
  "1e",
  "1E-7",
  "+1",
  "1e999",
  '"a"',
  '"a',
  '"\\u00e9\\n\\"\\\\\\/"',
  '"\\x41"',
  '"\\u12G4"',
  '"\u0001"',
  '"\ud800"',
  "[]",
  "[ ]",
  "[1,]",
  "[,1]",
  "[1 2]",
  "[1]]",
  "[[1]",
  "[1]\u0001[2]",
  "{}",
  '{"a":1}',
  '{"a":1,}',
  '{"a" 1}',
  '{"a":}',
  "{a:1}",
  '{"a":1]',
  '[{"a":[{"b":{}}]},null]',
  '{"$":"u"',
  '{"$":"u"}',
  "\t\r\n[\n1\n]\n",
  "\u00a0[]",
  "[1]x",
];

describe("scanJson: one JSON value, checked without building it", () => {
  it("agrees with JSON.parse on each edge case", () => {
    for (const text of CASES) expect(scanJson(text), JSON.stringify(text)).toBe(parsedKind(text));
  });

  it("agrees with JSON.parse on random mutations of real encodings", () => {
    const seeds = CASES.filter((text) => parsedKind(text) !== undefined).concat([
      JSON.stringify({ a: [1, -2.5e-3, "x\ny", { b: null, c: [true, false] }], $: "o" }),
    ]);
    const alphabet = '{}[]":,-+.eE0123456789 \\ntrufals\u0001';
    let seed = 12345;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let k = 0; k < 20_000; k++) {
      const base = seeds[random(seeds.length)];
      const at = random(base.length + 1);
      const mutated =
        random(2) === 0
          ? base.slice(0, at) + alphabet[random(alphabet.length)] + base.slice(at)
          : base.slice(0, at) + base.slice(at + 1);
      expect(scanJson(mutated), JSON.stringify(mutated)).toBe(parsedKind(mutated));
    }
  });

  it("stops at the first value or member past its bounds", () => {
    expect(scanJson("[1,2,3]", { values: 4 })).toBe("array");
    expect(scanJson("[1,2,3]", { values: 3 })).toBe("excess");
    expect(scanJson('{"a":1,"b":2}', { members: 2 })).toBe("object");
    expect(scanJson('{"a":1,"b":2}', { members: 1 })).toBe("excess");
    // Counted as met: text past the bound is never read, malformed or not.
    expect(scanJson("[1,2,oops", { values: 2 })).toBe("excess");
  });

  it("follows deep nesting without recursion", () => {
    expect(scanJson(`${"[".repeat(200_000)}${"]".repeat(200_000)}`)).toBe("array");
    expect(scanJson(`${"[".repeat(200_000)}${"]".repeat(199_999)}`)).toBeUndefined();
  });
});
