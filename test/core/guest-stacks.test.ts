import { describe, expect, it } from "vitest";
import { boundedStack, cleanErrorStacks, MAX_STACK_LINES, withoutRuntimeFrames } from "../../src/core/guest-errors.js";
import { type EncodedLineMap, originalPosition, remapStack } from "../../src/core/source-map.js";

/** Base64 VLQ of one value, as source maps write it. */
function vlq(value: number): string {
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  let rest = value < 0 ? (-value << 1) | 1 : value << 1;
  let out = "";
  do {
    let digit = rest & 31;
    rest >>>= 5;
    if (rest > 0) digit |= 32;
    out += B64[digit];
  } while (rest > 0);
  return out;
}

/** A map whose generated line 1 has `count` segments, 5 columns apart, segment i at original line i+1. */
function longLineMap(count: number): EncodedLineMap {
  const segments = [`AAAA`];
  for (let i = 1; i < count; i++) segments.push(`${vlq(5)}A${vlq(1)}A`);
  return { mappings: segments.join(",") };
}

describe("remapStack", () => {
  it("maps every frame on a long generated line to its segment (binary search, one decode)", () => {
    const map = longLineMap(5000);
    for (const [column, line] of [
      [1, 1],
      [5, 1],
      [6, 2],
      [24_996, 5000],
      [99_999, 5000],
    ]) {
      expect(originalPosition(map, 1, column), String(column)).toEqual({ line, column: 1 });
    }
    const frames = Array.from({ length: 5000 }, (_, i) => `    at f (g.js:1:${5 * i + 1})`);
    const started = performance.now();
    const mapped = remapStack(`Error: x\n${frames.join("\n")}`, "g.js", map).split("\n");
    // Decoding the line once per frame took 5.5 s here (a guest's repeated frames held the host).
    expect(performance.now() - started).toBeLessThan(2000);
    expect(mapped.length).toBe(5001);
    expect(mapped[1]).toBe("    at f (g.js:1:1)");
    expect(mapped[5000]).toBe("    at f (g.js:5000:1)");
  });
});

describe("guest stacks on the host", () => {
  it("keep their first MAX_STACK_LINES lines, and say how many more were cut", () => {
    const short = `Error: x\n${"    at f (g.js:1:1)\n".repeat(10)}`;
    expect(boundedStack(short)).toBe(short);
    const lines = ["Error: x", ...Array.from({ length: 5000 }, (_, i) => `    at f${i} (g.js:1:1)`)];
    const cut = boundedStack(lines.join("\n")).split("\n");
    expect(cut.length).toBe(MAX_STACK_LINES + 1);
    expect(cut.slice(0, MAX_STACK_LINES)).toEqual(lines.slice(0, MAX_STACK_LINES));
    expect(cut[MAX_STACK_LINES]).toBe(`    [cordon: ${lines.length - MAX_STACK_LINES} more stack lines cut]`);
  });

  it("are cleaned inside an AggregateError's errors, whose property is not enumerable", () => {
    const inner = new Error("inner");
    Object.defineProperty(inner, "stack", { value: "Error: inner\n    at g (<guest>:1:1)\n    at run (<cordon>:4232:49)" });
    const aggregate = new AggregateError([inner], "all");
    expect(Object.keys(aggregate)).not.toContain("errors");
    cleanErrorStacks({ aggregate }, (stack) => stack.replace(/\n.*<cordon>.*/g, ""));
    expect(inner.stack).toBe("Error: inner\n    at g (<guest>:1:1)");
  });

  it("past the walk's budget keep their header only, never the text as the guest wrote it", () => {
    const huge = `Error: x\n${`    at f (g.js:1:1) ${"y".repeat(2000)}\n`.repeat(1500)}`;
    const errors = Array.from({ length: 4 }, (_, i) => Object.defineProperty(new Error(`e${i}`), "stack", { value: huge }));
    let cleaned = 0;
    cleanErrorStacks(errors, (stack) => {
      cleaned++;
      return stack;
    });
    // 3 MB each: two fit the 4 MiB budget (the walk takes the last first), the others do not.
    expect(cleaned).toBe(2);
    expect(errors.map((e) => e.stack === "Error: e0" || e.stack === "Error: e1")).toEqual([true, true, false, false]);
  });
});

describe("withoutRuntimeFrames (log lines)", () => {
  it("drops the runtime's frames of either form and keeps every other line, and what followed a frame", () => {
    const logged = [
      "{ e: Error: x",
      "    at inner (<guest>:1:2)",
      "    at outcomeOf (<cordon>:4090:33)",
      "    at <cordon>:4280:49",
      "    at async run (<cordon>:12) } after",
      "a line of the guest's own, naming <cordon>:1:2 in passing",
    ].join("\n");
    expect(withoutRuntimeFrames(logged)).toBe(
      ["{ e: Error: x", "    at inner (<guest>:1:2) } after", "a line of the guest's own, naming <cordon>:1:2 in passing"].join(
        "\n",
      ),
    );
  });

  it("leaves text without a runtime frame as it is, and a frame with nothing before it goes whole", () => {
    const text = "plain\n    at f (<guest>:3:4)";
    expect(withoutRuntimeFrames(text)).toBe(text);
    expect(withoutRuntimeFrames("    at x (<cordon>:1:2) tail\nend")).toBe("end");
    // A file merely named like the runtime's is the guest's: "my<cordon>" is not "<cordon>".
    expect(withoutRuntimeFrames("    at f (lib<cordon>.js:1:2)")).toBe("    at f (lib<cordon>.js:1:2)");
  });
});
