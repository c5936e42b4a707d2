import { accessSync, constants, statSync } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { delimiter, join } from "node:path";
import { CordonError } from "../../core/errors.js";
import { type CommandOutcome, runCommand } from "../../core/run-command.js";

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

/** How long one mkfifo call may take (it makes 16 FIFOs in a few ms). */
const MKFIFO_TIMEOUT_MS = 10_000;

/** Make FIFOs at `paths`, readable and writable by this user only (through the spawner process: core/run-command.ts). */
export async function makeFifos(mkfifo: string, paths: string[]): Promise<void> {
  let outcome: CommandOutcome;
  try {
    outcome = await runCommand(mkfifo, ["-m", "600", ...paths], { env: {}, timeoutMs: MKFIFO_TIMEOUT_MS });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") throw mkfifoMissing();
    throw fifosFailed((error as Error).message);
  }
  if (outcome.code === 0) return;
  throw fifosFailed(outcome.stderr.trim() || `mkfifo ended with ${outcome.signal ?? `exit code ${outcome.code}`}`);
}

function fifosFailed(detail: string): CordonError {
  return new CordonError("ERR_ENGINE_UNAVAILABLE", `cordon: engine "deno" could not make its protocol FIFOs: ${detail}`);
}

/** FIFOs one mkfifo call makes ahead: enough for 8 Deno processes. */
const STOCK_BATCH = 16;
/** FIFOs made ahead (in the host's own directory), moved into a process's directory when taken. */
const stock: string[] = [];
let stocking: Promise<void> | undefined;
let made = 0;

/**
 * Put a FIFO at each of `paths`, from FIFOs made ahead in `stockDir` (same file system: a rename).
 * A spawn from the host blocks its event loop until the child has exec'd (libuv forks the whole
 * host: 7 ms here from a small Node process, 30 ms from one with 480 MB resident): mkfifo runs
 * through the spawner process once it is ready, and one call makes FIFOs for 8 processes. A stock
 * FIFO that is gone (a temp cleaner removed the directory) is given up, and the FIFOs are made in
 * place.
 */
export async function placeFifos(mkfifo: string, stockDir: () => string, paths: string[]): Promise<void> {
  try {
    while (stock.length < paths.length) {
      stocking ??= restock(mkfifo, stockDir()).finally(() => {
        stocking = undefined;
      });
      await stocking;
    }
    const taken = stock.splice(stock.length - paths.length);
    await Promise.all(paths.map((path, i) => rename(taken[i], path)));
  } catch {
    stock.length = 0;
    // One of the two may have been moved before the other failed.
    await Promise.all(paths.map((path) => rm(path, { force: true })));
    await makeFifos(mkfifo, paths);
  }
}

async function restock(mkfifo: string, dir: string): Promise<void> {
  const paths = Array.from({ length: STOCK_BATCH }, () => `${dir}/fifo-${++made}`);
  await makeFifos(mkfifo, paths);
  stock.push(...paths);
}
