import { constants, mkdirSync } from "node:fs";
import { copyFile, mkdir, symlink } from "node:fs/promises";
import { join } from "node:path";
import { closeWebStorage } from "./private-dir.js";

/**
 * Each Deno process gets a DENO_DIR of its own, beside its private directory and removed with
 * it. Deno writes a V8 code-cache row and a dependency-analysis row for every module it loads,
 * keyed by the module's URL: a guest's modules (its private directory's files, `data:` URLs,
 * every module-form run's `?r=N` entry) are new URLs in every process, so a shared DENO_DIR grew
 * without bound and was never read back (found by review: 0 -> 194 MB over 4 runs under
 * deno.diskMb 16, kept after dispose). In the process's own directory those rows count against
 * its disk limit and go with it.
 *
 * Only downloads stay shared (npm packages, remote modules and their transpiled output):
 * `cacheDir`'s, linked in. The code cache of what every process loads before any guest code
 * (the bootstrap, Deno's lazily loaded `ext:` modules) comes from a seed copied in (seed.ts):
 * without it every process compiled them afresh, 1.5-2x the start-up.
 */
export interface Seed {
  dir: string;
  /** Its database files (sqlite, checkpointed: no -wal or -shm to copy). */
  files: readonly string[];
}

/** Shared subdirectories of DENO_DIR: what Deno downloads, and `gen`'s transpiled remote modules. */
const DOWNLOADS = ["npm", "remote", join("gen", "http"), join("gen", "https")];

/** Cache directories whose download directories exist (made once, not per process). */
const madeDownloads = new Set<string>();

/** Makes `<root>/deno`, a process's DENO_DIR: the seed's caches, links to the shared downloads, web storage off. */
export async function makeDenoDir(root: string, cacheDir: string, seed: Seed | undefined): Promise<string> {
  const dir = join(root, "deno");
  await mkdir(join(dir, "gen"), { recursive: true, mode: 0o700 });
  if (!madeDownloads.has(cacheDir)) {
    for (const name of DOWNLOADS) mkdirSync(join(cacheDir, name), { recursive: true });
    madeDownloads.add(cacheDir);
  }
  const copies = (seed?.files ?? []).map((name) =>
    // A reflink where the file system has them. A seed replaced meanwhile: this process
    // compiles what the copy would have held.
    copyFile(join(seed?.dir ?? "", name), join(dir, name), constants.COPYFILE_FICLONE).catch(() => {}),
  );
  await Promise.all([...DOWNLOADS.map((name) => symlink(join(cacheDir, name), join(dir, name))), ...copies]);
  closeWebStorage(dir);
  return dir;
}
