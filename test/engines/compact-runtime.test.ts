import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { transform } from "esbuild";
import { afterAll, describe, expect, it } from "vitest";
import { guestRuntimeScript } from "../../src/engines/guest/bundle.js";
import { compactGuestRuntimeScript, readPrebuilt, writePrebuilt } from "../../src/engines/guest/compact-runtime.js";

/** QuickJS's minified guest runtime is made at build time; a file that does not match its script is not used. */
describe("the guest runtime minified at build time", () => {
  const dir = mkdtempSync(join(tmpdir(), "cordon-compact-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("is what minifying at run time gives, and is read back only for the script it was made from", async () => {
    const file = join(dir, "runtime.min.json");
    await writePrebuilt(transform, file);
    const prebuilt = readPrebuilt(file, guestRuntimeScript());
    // These tests run the TypeScript sources, for which the build made no file: minified here.
    expect(prebuilt).toBe(await compactGuestRuntimeScript());
    expect(prebuilt?.startsWith("(function(){")).toBe(true);
    // Made from another script (a build older than the code beside it): not used.
    expect(readPrebuilt(file, `${guestRuntimeScript()} `)).toBeUndefined();
  });

  it.each([
    ["missing", undefined],
    ["not JSON", "{"],
    ["null", "null"],
    ["no code", JSON.stringify({ sourceSha256: "x" })],
    ["code not a string", JSON.stringify({ sourceSha256: "x", code: 1 })],
  ])("a file that is %s is not used", (name, content) => {
    const file = join(dir, `${name}.json`);
    if (content !== undefined) writeFileSync(file, content);
    expect(readPrebuilt(file, guestRuntimeScript())).toBeUndefined();
  });

  // In a plain Node process: vitest rewrites the modules it loads (dist/ too), and so the script.
  it("the build wrote one for the compiled runtime (dist/), which a process reads instead of minifying", () => {
    const script = `
      const dist = ${JSON.stringify(new URL("../../dist/engines/guest/", import.meta.url).href)};
      const { compactGuestRuntimeScript, readPrebuilt } = await import(dist + "compact-runtime.js");
      const { guestRuntimeScript } = await import(dist + "bundle.js");
      const file = new URL("guest-runtime.min.json", dist);
      const prebuilt = readPrebuilt(file, guestRuntimeScript());
      const started = performance.now();
      const code = await compactGuestRuntimeScript();
      console.log(JSON.stringify({ prebuilt: typeof prebuilt, same: code === prebuilt, ms: performance.now() - started }));`;
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    const seen = JSON.parse(out) as { prebuilt: string; same: boolean; ms: number };
    expect(seen.prebuilt).toBe("string");
    expect(seen.same).toBe(true);
    // Read, not made: esbuild's service alone takes longer to start.
    expect(seen.ms).toBeLessThan(100);
  });
});
