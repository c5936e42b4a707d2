import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/** `cordon/names` is imported by config validators and UIs that may not have isolated-vm built. */
describe("cordon/names entry", () => {
  it("imports nothing, so it can never load a native module", () => {
    const source = readFileSync(fileURLToPath(new URL("../../src/names.ts", import.meta.url)), "utf8");
    expect(source).not.toMatch(/^\s*import\s/m);
    expect(source).not.toMatch(/\brequire\(|import\(/);
  });

  it("loads in a process where native addons are forbidden", () => {
    const entry = fileURLToPath(new URL("../../dist/names.js", import.meta.url));
    // Any attempt to load a native addon throws in this child.
    const script = `process.dlopen = () => { throw new Error("native module loaded") };
      const names = await import(${JSON.stringify(entry)});
      console.log(names.isValidGlobalName("fetchUser"), names.isValidGlobalName("console"));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    expect(child.stderr).toBe("");
    expect(child.stdout.trim()).toBe("true false");
  });
});
