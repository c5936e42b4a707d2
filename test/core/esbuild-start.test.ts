import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";

/**
 * A sandbox starts esbuild's service as it is made: the first run compiles its module with it,
 * and its start (~160 ms, its first transform included) was counted in that run's wall time
 * (a first run under `wallTimeMs: 50` failed ERR_WALL_TIMEOUT, "63 ms of it compiling").
 */
describe("esbuild's service, started with the sandbox", () => {
  // In a plain Node process from dist/: the test runner's own process has compiled already.
  it("is running (its Go process too: the client starts it at its first call) before any run", () => {
    const script = `
      import { readdirSync, readFileSync } from "node:fs";
      const { createSandbox } = await import(${JSON.stringify(new URL("../../dist/index.js", import.meta.url).href)});
      const parentOf = (pid) => { try { const s = readFileSync("/proc/" + pid + "/stat", "utf8"); return Number(s.slice(s.lastIndexOf(")") + 2).split(" ")[1]); } catch { return 0; } };
      const esbuildBelow = (root) => readdirSync("/proc").filter((d) => /^\\d+$/.test(d)).some((d) => {
        let cmd = ""; try { cmd = readFileSync("/proc/" + d + "/cmdline", "latin1"); } catch { return false; }
        const argv = cmd.split(String.fromCharCode(0));
        if (!argv[0].endsWith("/esbuild") || !argv.some((arg) => arg.startsWith("--service="))) return false;
        for (let pid = Number(d), i = 0; pid > 1 && i < 10; pid = parentOf(pid), i++) if (pid === root) return true;
        return false;
      });
      const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
      const deadline = performance.now() + 15000;
      let found = esbuildBelow(process.pid);
      while (!found && performance.now() < deadline) { await new Promise((r) => setTimeout(r, 50)); found = esbuildBelow(process.pid); }
      console.log(JSON.stringify({ found }));
      await sandbox.dispose();`;
    const out = execFileSync(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], { encoding: "utf8" });
    const seen = JSON.parse(out) as { found: boolean };
    expect(seen.found).toBe(true);
  });
});
