import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * isolated-vm's README asks for `node --no-node-snapshot` on Node >= 20: V8's shared heap can
 * crash a process whose isolates start from different snapshots. This pins what we found on the
 * machines cordon is tested on (Linux x64, Node 20): the in-process workload survives without
 * the flag. The README still tells users to pass it (reports of crashes on macOS arm64), and
 * cordon's own CLI and worker processes always do.
 */
describe("node --no-node-snapshot", () => {
  it("the v8 engine's isolate workload runs in a process started without the flag", () => {
    const script = fileURLToPath(new URL("../fixtures/isolates-without-snapshot-flag.mjs", import.meta.url));
    const child = spawnSync(process.execPath, [script], {
      encoding: "utf8",
      timeout: 60_000,
      env: { ...process.env, NODE_OPTIONS: "" },
    });
    expect(child.signal, child.stderr).toBeNull();
    expect(child.status, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout)).toEqual(["completed", "memory"]);
  });
});
