import { lstatSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * A directory of this user's in the temporary directory, shared by cordon's processes: the
 * Deno bootstrap every guest process runs, and Deno's cache. Other users share the temporary
 * directory too: a predictable name there could be made first by someone else, holding a
 * planted bootstrap (found by review: it ran inside every guest's process). So the name carries
 * the uid, and the directory is used only when it is a real directory of this user's that no one
 * else may write; otherwise this process makes a fresh private one (and loses only the sharing).
 */
export function privateTempDir(name: string): string {
  const uid = process.getuid?.();
  const dir = join(tmpdir(), uid === undefined ? name : `${name}-${uid}`);
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  const stat = lstatSync(dir);
  const ours = uid === undefined || (stat.uid === uid && (stat.mode & 0o022) === 0);
  if (stat.isDirectory() && ours) return dir;
  return mkdtempSync(join(tmpdir(), `${name}-`));
}

/**
 * Deno keeps `localStorage` and the Cache API's data under DENO_DIR/location_data, keyed by the
 * main module: one bootstrap for every function, so every guest read every other guest's
 * storage, across sandboxes and restarts (found by review), with no permission needed. A file
 * in that place makes both throw (Deno cannot make the directory), in every realm of the process.
 */
export function closeWebStorage(denoDir: string): void {
  const place = join(denoDir, "location_data");
  mkdirSync(denoDir, { recursive: true });
  try {
    if (lstatSync(place).isFile()) return;
    rmSync(place, { recursive: true, force: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  try {
    writeFileSync(place, "cordon: web storage is off for guests\n", { flag: "wx" });
  } catch (error) {
    // Another cordon process made it first.
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
}
