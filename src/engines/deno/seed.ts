import { ENCODED_UNDEFINED } from "../../core/codec.js";
import { runCommand } from "../../core/run-command.js";
import { createHash } from "node:crypto";
import { lstatSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Seed } from "./deno-dir.js";
import { DenoProcess } from "./process.js";
import { bootstrapFile, NODE_BUILTINS } from "./script.js";

/** Deno's cache databases (v8_code_cache_v2, dep_analysis_cache_v2, node_analysis_cache_v2). */
const DATABASE = /^[a-z0-9_]+_v\d+$/;
const SEED_TIMEOUT_MS = 20_000;
/** Builtins not worth a seed's bytes: node:test registers a runner, the others have no module in Deno. */
const UNLOADABLE = new Set(["test", "sea", "inspector/promises"]);

let current: { binary: string; seed: Seed | undefined } | undefined;

/**
 * The caches a new Deno process starts from (deno-dir.ts): what one process of this Deno binary
 * and bootstrap wrote before any guest code ran, kept beside the bootstrap (this user's private
 * directory; no guest process writes there). While there is none, this returns undefined (the
 * process starts without one) and makes it, once per host process.
 */
export function currentSeed(binary: string, cacheDir: string): Seed | undefined {
  if (current?.binary === binary) return current.seed;
  // Named by the bootstrap (its name is its content's hash) and the binary: either changes what is cached.
  const { main } = bootstrapFile();
  const stat = statSync(binary);
  const key = createHash("sha256").update(`${binary}\0${stat.size}\0${stat.mtimeMs}`).digest("hex").slice(0, 16);
  const path = `${main.slice(0, -".js".length)}.seed-${key}`;
  const entry: { binary: string; seed: Seed | undefined } = { binary, seed: readSeed(path) };
  current = entry;
  if (entry.seed === undefined) {
    makeSeed(binary, cacheDir, path).then(
      () => {
        entry.seed = readSeed(path);
      },
      // Processes start without a seed: slower, nothing else.
      () => {},
    );
  }
  return entry.seed;
}

function readSeed(dir: string): Seed | undefined {
  try {
    if (!lstatSync(dir).isDirectory()) return undefined;
    const files = readdirSync(dir).filter((name) => DATABASE.test(name));
    return files.length > 0 ? { dir, files } : undefined;
  } catch {
    return undefined;
  }
}

/** Starts one process with nothing but the bootstrap, keeps its checkpointed databases as the seed. */
async function makeSeed(binary: string, cacheDir: string, path: string): Promise<void> {
  const work = mkdtempSync(`${path}.making-`);
  try {
    const maker = await DenoProcess.start({ binary, memoryMb: 128, importHosts: [], cacheDir, denoDir: work });
    const exited = new Promise((resolve) => maker.child.onExit(() => resolve(undefined)));
    try {
      await maker.ready;
      // Node's builtins too (Deno compiles each on first import): a guest's `import "node:fs"`
      // compiled them afresh in every process, +25% CPU at its start. 2 MB where 1 MB without.
      const builtins = JSON.stringify(NODE_BUILTINS.filter((name) => !UNLOADABLE.has(name)));
      const script = `(function () { return { default: async () => {
        for (const name of ${builtins}) await import("node:" + name).catch(() => {});
      } }; })`;
      const evaluate = { t: "evaluate", work: 1, bindingsText: '{"globals":{},"modules":{}}', mode: "run" };
      const caps = [1 << 20, 10, 1 << 16, 1 << 20];
      await exchange(
        maker,
        { ...evaluate, inputText: ENCODED_UNDEFINED, caps, reset: false, script, filename: "<seed>" },
        "done",
      );
      // A module's code cache is written when its evaluation ends; a ping is answered after.
      await exchange(maker, { t: "ping", seq: 1 }, "reply");
    } finally {
      maker.kill("seeded");
      await exited;
    }
    const files = readdirSync(work).filter((name) => DATABASE.test(name));
    await checkpoint(binary, work, files);
    for (const name of readdirSync(work)) {
      if (!files.includes(name)) rmSync(join(work, name), { recursive: true, force: true });
    }
    try {
      renameSync(work, path);
    } catch {
      // Another host process made it first.
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Sends `message`; resolves on the first frame of type `answer`. */
function exchange(process: DenoProcess, message: Record<string, unknown>, answer: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    process.onMessage = (frame) => {
      if (frame.t === answer || frame.t === "threw") resolve();
    };
    process.onExit = (reason) => reject(new Error(reason));
    process.send(message);
  });
}

/**
 * Folds each database's write-ahead log into it (the killed process left one): the seed is then
 * a single file per database, 1 MB where file and log were 3.5 MB, and a copy of it never
 * holds the same pages twice. Deno's own `node:sqlite`, run as trusted code.
 */
async function checkpoint(binary: string, dir: string, files: string[]): Promise<void> {
  const paths = JSON.stringify(files.map((name) => join(dir, name)));
  const script = `import { DatabaseSync } from "node:sqlite";
for (const path of ${paths}) {
  const db = new DatabaseSync(path);
  db.exec("PRAGMA wal_checkpoint(TRUNCATE);");
  db.close();
}`;
  // Through the spawner process once it is ready: a spawn from here forks the host (core/run-command.ts).
  const outcome = await runCommand(binary, ["eval", "--quiet", "--no-config", script], {
    env: { DENO_DIR: join(dir, ".eval"), DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
    timeoutMs: SEED_TIMEOUT_MS,
  });
  if (outcome.code !== 0) throw new Error(`checkpointing the seed failed (${outcome.signal ?? outcome.code})`);
}
