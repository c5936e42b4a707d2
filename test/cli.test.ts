import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

/** The real command line: `node bin/cordon.js` (the built dist/, fresh from `pretest`). */
const BIN = fileURLToPath(new URL("../bin/cordon.js", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "cordon-cli-"));
/** Directories the tests write their functions into, removed at the end. */
const made = [dir];
afterAll(() => {
  for (const path of made) rmSync(path, { recursive: true, force: true });
});

function cordon(...args: string[]) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", timeout: 30_000 });
}

function file(name: string, code: string): string {
  const path = join(dir, name);
  writeFileSync(path, code);
  return path;
}

describe("cordon run", () => {
  it("prints the value as JSON and guest logs on stderr", () => {
    const out = cordon(
      "run",
      file("ok.ts", "export default (i: { n: number }) => { console.log('working'); return { doubled: i.n * 2 } }"),
      "--input",
      '{"n":21}',
    );
    expect(out.status).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({ doubled: 42 });
    expect(out.stderr).toContain("[log] working");
  });

  it("a failure prints its code and message and exits 1", () => {
    const thrown = cordon("run", file("bad.js", "export default () => { throw new TypeError('nope') }"));
    expect(thrown.status).toBe(1);
    expect(thrown.stderr).toContain("ERR_USER_CODE: nope");
    const spin = cordon("run", file("spin.js", "export default () => { for (;;) {} }"), "--timeout", "200");
    expect(spin.status).toBe(1);
    expect(spin.stderr).toMatch(/ERR_(CPU|WALL)_TIMEOUT/);
    const memory = cordon(
      "run",
      file("mem.js", "export default () => { const a = []; for (;;) a.push(new ArrayBuffer(1 << 20)) }"),
      "--memory",
      "16",
    );
    expect(memory.status).toBe(1);
    expect(memory.stderr).toContain("ERR_MEMORY_LIMIT");
  });

  it("--call calls a named export with --args", () => {
    const code = "export const handlers = { base: 10, add(a: number, b: number) { return this.base + a + b } }";
    const out = cordon("run", file("handlers.ts", code), "--call", "handlers.add", "--args", "[1, 2]");
    expect(out.status).toBe(0);
    expect(JSON.parse(out.stdout)).toBe(13);
    const missing = cordon("run", file("handlers2.ts", code), "--call", "handlers.sub");
    expect(missing.status).toBe(1);
    expect(missing.stderr).toContain('ERR_CALL_TARGET_NOT_FOUND: the module has no function at export path "handlers.sub"');
  });

  it("bad arguments exit 2 with a message", () => {
    const x = file("x.js", "export default 1");
    const cases: [string[], string][] = [
      [["--call", "a..b"], "--call must be a dotted export path"],
      [["--call", "f", "--args", '{"a":1}'], "--args must be a JSON array"],
      [["--args", "[]"], "--args needs --call"],
      [["--call", "f", "--input", "1"], "--input and --call are exclusive"],
    ];
    for (const [args, message] of cases) {
      const out = cordon("run", x, ...args);
      expect(out.status, args.join(" ")).toBe(2);
      expect(out.stderr).toContain(message);
    }
    expect(cordon("run").status).toBe(2);
    const badInput = cordon("run", file("x.js", "export default 1"), "--input", "{nope");
    expect(badInput.status).toBe(2);
    expect(badInput.stderr).toContain("--input must be JSON");
    const missing = cordon("run", join(dir, "missing.js"));
    expect(missing.status).toBe(2);
    expect(missing.stderr).toContain("cannot read");
  });

  it("a limit or a file name the sandbox refuses exits 2 with usage, not a host stack", () => {
    // --timeout 3000000000 printed an uncaught TypeError and its host stack, exit 1; so did a
    // file named with a control character, as one of cordon's own names, or over 256 characters.
    const x = file("x.js", "export default 1");
    const cases: [string[], string][] = [
      [[x, "--timeout", "3000000000"], "--timeout must be a positive number up to 2000000000"],
      [[x, "--memory", "1e12"], "--memory must be a positive number up to"],
      [[file("we ird\u0001name.ts", "export default 1")], "must not contain control characters"],
      [[file("cordon:x.ts", "export default 1")], "is one of cordon's own names"],
      // No file system stores such a name: the argument is refused before the file is read.
      [[join(dir, `${"a".repeat(300)}.ts`)], "longer than 256 characters"],
    ];
    for (const [args, message] of cases) {
      const out = cordon("run", ...args);
      expect(out.status, args.join(" ")).toBe(2);
      expect(out.stderr).toContain(message);
      expect(out.stderr).toContain("usage: cordon run");
      expect(out.stderr).not.toMatch(/\n\s+at /);
    }
    const dirCordon = join(dir, "own");
    mkdirSync(dirCordon, { recursive: true });
    writeFileSync(join(dirCordon, "<cordon>"), "export default 1");
    const own = cordon("run", join(dirCordon, "<cordon>"));
    expect(own.status).toBe(2);
    expect(own.stderr).toContain("is one of cordon's own names");
    // Within range, as before.
    const fine = cordon("run", x, "--timeout", "2000000000", "--memory", "64");
    expect(fine.status).toBe(0);
    expect(fine.stdout.trim()).toBe("1");
  });
});

describe("cordon check", () => {
  it("loads a function in the deno engine and resolves its imports without calling it", () => {
    const fn = mkdtempSync(join(tmpdir(), "cordon-check-"));
    made.push(fn);
    writeFileSync(
      join(fn, "main.ts"),
      "import { sq } from './lib/m.ts';\nexport const config = { a: 1 };\nexport default (n: number) => { throw new Error('called') }; sq(1);",
    );
    mkdirSync(join(fn, "lib"));
    writeFileSync(join(fn, "lib", "m.ts"), "export const sq = (n: number) => n * n;");
    const ok = cordon("check", join(fn, "main.ts"));
    expect(ok.stderr).toBe("");
    expect(ok.status).toBe(0);
    // why: a module whose only export is its default printed "exports []".
    expect(ok.stdout).toContain('ok: main.ts exports ["config"], default export: function');
    writeFileSync(join(fn, "bad.ts"), "import x from './nope.js';\nexport default x;");
    const bad = cordon("check", join(fn, "bad.ts"));
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain("ERR_MODULE_NOT_FOUND");
    expect(bad.stderr).toContain("./nope.js");
  });
});
