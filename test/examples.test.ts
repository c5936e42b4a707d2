import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/** The examples as a reader runs them: `node --no-node-snapshot examples/<name>` against dist/ (built by `pretest`). */
function example(name: string) {
  const path = fileURLToPath(new URL(`../examples/${name}`, import.meta.url));
  return spawnSync(process.execPath, ["--no-node-snapshot", path], { encoding: "utf8", timeout: 60_000 });
}

describe("examples stay true", () => {
  it("agent-tools: the tools answer, a loop hits its CPU limit, the host stays out of reach", () => {
    const out = example("agent-tools.mjs");
    expect(out.status, out.stderr).toBe(0);
    const outcomes = out.stdout.split("\n").filter((line) => line.startsWith("  -> "));
    expect(outcomes).toEqual([
      '  -> {"count":1,"first":"a prefix is prepared once"}',
      "  -> ERR_CPU_TIMEOUT: the run exceeded its CPU time limit of 50 ms",
      "  -> ERR_USER_CODE: process is not defined",
      "  -> ERR_USER_CODE: process is not defined",
    ]);
  });

  it("tenant-handlers: a Request in, a Response out, one-off and warm", () => {
    const out = example("tenant-handlers.mjs");
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("one-off: 200 acme { hello: 'ada', served: 1 }");
    // why: the warm instance keeps module state between calls; the one-off never did.
    expect(out.stdout).toContain("warm call 3: { hello: 'ada', served: 3 }");
    // One warm instance; right after an async handler's call it may still be finishing what the
    // call left queued (its crossing returning) before it counts as idle.
    expect(out.stdout).toMatch(/stats: \{ warmInstances: 1, idleInstances: [01] \}/);
  });
});
