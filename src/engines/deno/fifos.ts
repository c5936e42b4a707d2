import { execFile } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { promisify } from "node:util";
import { CordonError } from "../../core/errors.js";

/**
 * The Deno protocol travels on two FIFOs (docs/decisions/018); Node cannot make one, so the
 * `mkfifo` command does. Found once, on the PATH the engine starts with, and run by its full
 * path from then on: a missing one is a clear start-up error, not a spawn error at the first run.
 */
export function findMkfifo(path = process.env.PATH ?? ""): string | undefined {
  for (const dir of path.split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, "mkfifo");
    try {
      if (!statSync(candidate).isFile()) continue;
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {}
  }
  return undefined;
}

let found: string | undefined;

/** The mkfifo command's full path, looked up once it is first found; throws ERR_ENGINE_UNAVAILABLE while it is missing. */
export function mkfifoCommand(): string {
  found ??= findMkfifo();
  if (!found) throw mkfifoMissing();
  return found;
}

function mkfifoMissing(): CordonError {
  return new CordonError(
    "ERR_ENGINE_UNAVAILABLE",
    'cordon: engine "deno" needs the mkfifo command (coreutils) on the PATH to make its protocol FIFOs; it was not found',
  );
}

const execFileAsync = promisify(execFile);

/** Make FIFOs at `paths`, readable and writable by this user only. */
export async function makeFifos(mkfifo: string, paths: string[]): Promise<void> {
  try {
    await execFileAsync(mkfifo, ["-m", "600", ...paths]);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") throw mkfifoMissing();
    const detail = (error as { stderr?: string }).stderr?.trim() || (error as Error).message;
    throw new CordonError("ERR_ENGINE_UNAVAILABLE", `cordon: engine "deno" could not make its protocol FIFOs: ${detail}`);
  }
}
