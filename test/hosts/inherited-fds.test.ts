import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * A host started with a descriptor it did not open (fd 100, a pipe from this test: inherited
 * without close-on-exec, as a supervisor's or a shell's `3>file` would be). Node's spawn passes
 * such a descriptor on to every child: a process worker closes it first thing, and a Deno
 * process is given /dev/null at its number before Deno starts.
 */
const children = [
  { name: "the process host's workers", options: '{ engine: "v8", host: "process", spareInstances: 0 }' },
  { name: "the deno engine's processes", options: '{ engine: "deno", spareInstances: 0 }' },
];

describe.each(children)("$name", ({ options }) => {
  it("do not keep descriptors their host inherited", async () => {
    const entry = fileURLToPath(new URL("../../dist/index.js", import.meta.url));
    const script = `import { readlinkSync } from "node:fs";
      const { createSandbox } = await import(${JSON.stringify(entry)});
      const sandbox = await createSandbox(${options});
      const run = await sandbox.run({ code: "export default 1" });
      const link = (pid) => { try { return readlinkSync("/proc/" + pid + "/fd/100") } catch { return null } };
      const workers = sandbox.stats().workers.map((w) => link(w.pid));
      console.log(JSON.stringify({ value: run.ok && run.value, host: link(process.pid), workers }));
      await sandbox.dispose();`;
    const child = spawn(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], {
      // fd 100 a pipe (a high number: low ones the worker reuses for its own descriptors).
      stdio: ["ignore", "pipe", "pipe", ...new Array(97).fill("ignore"), "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout?.on("data", (chunk) => (out += chunk));
    child.stderr?.on("data", (chunk) => (err += chunk));
    const code = await new Promise((resolve) => child.on("exit", resolve));
    expect(code, err).toBe(0);
    const seen = JSON.parse(out.trim()) as { value: number; host: string | null; workers: (string | null)[] };
    expect(seen.value).toBe(1);
    // The host has it (the premise), and no child does: closed, or /dev/null in its place.
    expect(seen.host).toMatch(/^(pipe|socket):/);
    expect(seen.workers.length).toBeGreaterThan(0);
    for (const link of seen.workers) expect([null, "/dev/null"]).toContain(link);
  });
});
