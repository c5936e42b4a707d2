import { readdir, readFile } from "node:fs/promises";
import { basename, dirname, join, relative } from "node:path";
import { createSandbox } from "../create-sandbox.js";

export const CHECK_USAGE = `usage: cordon check <file>

  Loads a function in the deno engine and resolves its imports without calling it: the module
  is evaluated (its top level runs) and its exports are listed. Files beside it (.js, .ts, .mjs,
  .mts, under its directory, node_modules skipped) are its multi-file source. Exits 1 on failure.`;

const SOURCE = /\.(?:m?[jt]s|tsx?|jsx)$/;
const MAX_FILES = 256;

/** `cordon check <file>`: prints the exports, or the failure's code and message. Returns the exit code. */
export async function check(args: string[]): Promise<number> {
  if (args.length !== 1 || args[0].startsWith("-")) {
    process.stderr.write(`${CHECK_USAGE}\n`);
    return 2;
  }
  const entry = args[0];
  const code = await readFile(entry, "utf8").catch(() => undefined);
  if (code === undefined) {
    process.stderr.write(`cordon: cannot read ${entry}\n`);
    return 2;
  }
  const root = dirname(entry);
  const files: Record<string, string> = {};
  for (const path of await sources(root, MAX_FILES + 1)) {
    if (path !== join(root, basename(entry))) files[relative(root, path)] = await readFile(path, "utf8");
  }
  const sandbox = await createSandbox({ engine: "deno", spareInstances: 0 });
  try {
    const result = await sandbox.readExports({ code, filename: basename(entry), files });
    const names = JSON.stringify(Object.keys(result.exports).concat(result.skippedExports).sort());
    const main = result.defaultExport === undefined ? "no default export" : `default export: ${result.defaultExport}`;
    process.stdout.write(`ok: ${basename(entry)} exports ${names}, ${main}\n`);
    return 0;
  } catch (error) {
    const failure = (error as { result?: { error?: { code: string; message: string } } }).result?.error;
    process.stderr.write(failure ? `${failure.code}: ${failure.message}\n` : `cordon: ${(error as Error).message}\n`);
    return 1;
  } finally {
    await sandbox.dispose();
  }
}

async function sources(dir: string, max: number, out: string[] = []): Promise<string[]> {
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (out.length >= max) break;
    const path = join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== "node_modules" && !entry.name.startsWith(".")) await sources(path, max, out);
    else if (entry.isFile() && SOURCE.test(entry.name)) out.push(path);
  }
  return out;
}
