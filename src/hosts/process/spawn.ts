import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { WorkerConfig } from "./worker-main.js";

/** The worker entry runs from dist/ (child processes run JavaScript; `npm test` builds first). */
const WORKER_MAIN = fileURLToPath(new URL("../../../dist/hosts/process/worker-main.js", import.meta.url));

/**
 * Start a worker process: a private working directory (`dir`, for its owner to remove when it
 * exits) and an empty environment, nothing of the host's. `entry` is a test hook.
 */
export function spawnWorker(config: WorkerConfig, entry?: string): { child: ChildProcess; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), "cordon-worker-"));
  try {
    const child = spawn(process.execPath, ["--no-node-snapshot", entry ?? WORKER_MAIN, JSON.stringify(config)], {
      cwd: dir,
      env: {},
      stdio: ["pipe", "pipe", "inherit"],
    });
    return { child, dir };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}
