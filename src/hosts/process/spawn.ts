import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { SpawnedChild } from "../../core/spawned-child.js";
import { spawnChild } from "../../core/spawner.js";
import type { WorkerConfig } from "./worker-main.js";

/** The worker entry runs from dist/ (child processes run JavaScript; `npm test` builds first). */
const WORKER_MAIN = fileURLToPath(new URL("../../../dist/hosts/process/worker-main.js", import.meta.url));

/**
 * glibc's malloc, given a fixed threshold, serves every allocation this large with its own mmap and
 * returns it to the system when freed. By default the threshold rises past the largest block freed
 * so far: after the first, a guest's 8 MB typed array came from malloc's arenas, disposing its
 * instance freed ~1 MB of resident size instead of ~9 (measured), and the shedder, looking for the
 * room it had freed, evicted every idle instance. Other C libraries ignore the variables.
 *
 * A fixed threshold also leaves the trim at its 128 KiB default, and each arena then gave the top of
 * its heap back to the system after nearly every free, to fault it in again at the next
 * allocation: ~400 page faults per one-off run in a v8 worker against ~300 (faults cost 12–15 µs
 * each on the development VM: ~1.3 ms of the worker's ~14 ms CPU a run). A top pad of 1 MiB keeps
 * that much at each heap's top (measured: 298–307 faults a run; a larger trim threshold alone did
 * not help). Large blocks are still mmapped and returned at once.
 */
const WORKER_ENV = { MALLOC_MMAP_THRESHOLD_: String(128 * 1024), MALLOC_TOP_PAD_: String(1024 * 1024) };

/**
 * Start a worker process (through the spawner process when it runs: core/spawner.ts): a private
 * working directory (`dir`, for its owner to remove when it exits) and an environment with
 * nothing of the host's (WORKER_ENV only). `entry` is a test hook.
 */
export function spawnWorker(config: WorkerConfig, entry?: string): { child: SpawnedChild; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), "cordon-worker-"));
  try {
    const child = spawnChild(process.execPath, [...nodeFlags(config), entry ?? WORKER_MAIN, JSON.stringify(config)], {
      cwd: dir,
      env: WORKER_ENV,
      stdio: ["pipe", "pipe", "inherit"],
    });
    return { child, dir };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * isolated-vm needs `--no-node-snapshot` (decision 002); a QuickJS worker never loads it, and Node
 * starts from its snapshot faster: measured here, `node -e 0` 0.10 s against 0.15–0.16 s.
 */
function nodeFlags(config: WorkerConfig): string[] {
  return config.engine === "v8" ? ["--no-node-snapshot"] : [];
}
