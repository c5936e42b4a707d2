import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/** Idle engines must not keep the host process alive: a sandbox nobody disposed must not hang it. */
describe.each(["v8", "quickjs"])("the %s engine in process", (engine) => {
  it("lets a process that never disposes its sandbox exit", () => {
    const entry = fileURLToPath(new URL("../../dist/index.js", import.meta.url));
    const script = `const { createSandbox } = await import(${JSON.stringify(entry)});
      const sandbox = await createSandbox({ host: "inprocess", engine: ${JSON.stringify(engine)} });
      const run = await sandbox.run({ code: "export default 1" });
      const prefix = await sandbox.prepare({ code: "export const f = () => 2" });
      console.log(run.ok && run.value, (await prefix.call({ export: "f" })).value);`;
    const child = spawnSync(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(child.signal, "the process hung").toBeNull();
    expect(child.status, child.stderr).toBe(0);
    expect(child.stdout.trim()).toBe("1 2");
  });
});
