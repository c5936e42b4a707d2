import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { firstErrorText, withEsbuild } from "../../src/core/esbuild-calls.js";
import { normalizeSource } from "../../src/core/source.js";
import { childPids } from "../executor/helpers.js";

/**
 * esbuild's JavaScript client runs on a worker thread: whatever it does there (throw inside its
 * own pipe handler, where no caller can catch it) ends at most that thread, never the host.
 */

/** This process's esbuild service processes: [pid, state] ("Z" for one nobody reaped). */
function esbuildProcesses(): [number, string][] {
  const found: [number, string][] = [];
  for (const pid of childPids(process.pid)) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      if (stat.includes("(esbuild)")) found.push([pid, stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]]);
    } catch {
      // Gone while we looked.
    }
  }
  return found;
}

/** Waits until at most one esbuild process is left (the current thread's), live; returns them. */
async function settledEsbuildProcesses(): Promise<[number, string][]> {
  const until = performance.now() + 10_000;
  let found = esbuildProcesses();
  while (performance.now() < until && (found.length > 1 || found.some(([, state]) => state === "Z"))) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    found = esbuildProcesses();
  }
  return found;
}

const transform = (code: string) => withEsbuild({ kind: "transform", code, options: { loader: "ts", logLevel: "silent" } });

describe("esbuild's client runs on a thread of its own", () => {
  it("esbuild's errors about the text cross the thread with their `errors` intact", async () => {
    const failed = await transform("let a = ;").catch((error: unknown) => error);
    expect(firstErrorText(failed)).toBe('Unexpected ";"');
    expect((failed as { errors: { location: { line: number } }[] }).errors[0].location.line).toBe(1);
    expect((await transform("let a: number = 1")).code).toBe("let a = 1;\n");
  });

  it("an output past V8's longest string fails its call with ERR_COMPILE; the host and later calls go on", async () => {
    // No nesting scan here (withEsbuild directly): 5 × 8,000 nested blocks print as 640 M
    // characters, past the 2^29-24 of one string. esbuild's client threw that inside its pipe
    // handler, where nothing caught it: on the host's thread it ended the process (this test).
    const blocks = `${"{".repeat(8000)}${"}".repeat(8000)}\n`.repeat(5);
    const before = transform("export const before: number = 1");
    // 110 s, not the default 60: under CI load ~5 printing 640 M characters outlasted 60 s once.
    const printed = withEsbuild({ kind: "transform", code: blocks, options: {} }, { timeoutMs: 110_000 });
    await expect(printed).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(
        /^<guest>: the compiled module is too large to read back from esbuild .*ERR_STRING_TOO_LONG/,
      ),
    });
    expect((await before).code).toContain("before = 1");
    expect((await normalizeSource("export default 2 as number;", "after.ts")).code).toContain("= 2");
    // The failed thread's service process ended and was reaped: only the new thread's is left.
    const left = await settledEsbuildProcesses();
    expect(left).toHaveLength(1);
    expect(left[0][1]).not.toBe("Z");
  }, 120_000);

  it("many transforms at once each get their own output; an aborted one beside them ends only itself", async () => {
    const controller = new AbortController();
    // 40,000 duplicate declarations keep esbuild busy for more than a minute (compile-bound.test.ts).
    const costly = withEsbuild(
      { kind: "transform", code: "let a;\n".repeat(40_000), options: { logLevel: "silent" } },
      { timeoutMs: 60_000, signals: [controller.signal], filename: "costly.js" },
    );
    const many = Array.from({ length: 100 }, (_, i) => transform(`export const v${i}: number = ${i};`));
    setTimeout(() => controller.abort(), 100);
    const started = performance.now();
    await expect(costly).rejects.toMatchObject({ code: "ERR_ABORTED" });
    expect(performance.now() - started).toBeLessThan(5_000);
    const outputs = await Promise.all(many);
    outputs.forEach((out, i) => {
      expect(out.code).toBe(`export const v${i} = ${i};\n`);
    });
    // Later calls go to a new thread; the abandoned one is stopped with its service process.
    expect((await transform("export const later: number = 3")).code).toContain("later = 3");
    const left = await settledEsbuildProcesses();
    expect(left).toHaveLength(1);
    expect(left[0][1]).not.toBe("Z");
  });
});
