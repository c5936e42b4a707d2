import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { HELPERS_PARAM } from "../../src/core/script-helpers.js";
import { readPrebuilt, warmUpModulesJson, writePrebuilt } from "../../src/engines/warm-up-modules.js";

/**
 * The spares' warm-up modules are made at build time: made at run time, they started esbuild's
 * service in every process-host worker (~160 ms of CPU and a 13 MB process), which compiles
 * nothing else.
 */
describe("the warm-up modules made at build time", () => {
  const dir = mkdtempSync(join(tmpdir(), "cordon-warm-up-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("are what esbuild makes here, named with this process's helpers parameter", async () => {
    const file = join(dir, "warm-up.json");
    await writePrebuilt(file);
    // Made by "another process": the helpers' name it was made with is put back as this one's.
    const other = "__cordon_helpers_0123456789abcdef";
    const saved = JSON.parse(readFileSync(file, "utf8")) as { helpersParam: string; json: string };
    writeFileSync(file, JSON.stringify({ ...saved, helpersParam: other, json: saved.json.split(HELPERS_PARAM).join(other) }));
    const prebuilt = readPrebuilt(file);
    // These tests run the TypeScript sources, for which the build made no file: made here.
    expect(prebuilt).toBe(await warmUpModulesJson());
    expect(prebuilt).toContain(HELPERS_PARAM);
    expect(prebuilt).not.toContain(other);
    expect((JSON.parse(prebuilt as string) as unknown[]).length).toBe(3);
  });

  it.each([
    ["missing", undefined],
    ["not JSON", "{"],
    ["null", "null"],
    ["made from other modules", JSON.stringify({ runsSha256: "x", helpersParam: "p", json: "[]" })],
    ["without its parameter's name", JSON.stringify({ json: "[]" })],
  ])("a file that is %s is not used", (name, content) => {
    const file = join(dir, `${name}.json`);
    if (content !== undefined) writeFileSync(file, content);
    expect(readPrebuilt(file)).toBeUndefined();
  });

  // In a plain Node process, from dist/: what a process-host worker does.
  it("a process reads the build's file and starts no esbuild service for them", () => {
    const script = `
      const dist = ${JSON.stringify(new URL("../../dist/engines/", import.meta.url).href)};
      const { warmUpModulesJson } = await import(dist + "warm-up-modules.js");
      const started = performance.now();
      const json = await warmUpModulesJson();
      const ms = performance.now() - started;
      const children = process.getActiveResourcesInfo().filter((kind) => kind === "ProcessWrap").length;
      console.log(JSON.stringify({ runs: JSON.parse(json).length, ms, children }));`;
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    const seen = JSON.parse(out) as { runs: number; ms: number; children: number };
    expect(seen.runs).toBe(3);
    expect(seen.children).toBe(0);
    // Read, not made: esbuild's service alone takes ~160 ms to start.
    expect(seen.ms).toBeLessThan(100);
  });
});
