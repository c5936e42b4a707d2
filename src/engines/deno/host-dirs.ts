import { lstatSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Where a host process's Deno processes keep their files: one directory per host process,
 * `<tmp>/cordon-deno-host-<random>`, holding one directory per Deno process. Deno was started
 * with a parent-death signal, so a host that exited without dispose() or crashed took its Deno
 * processes down before they could remove their directories, and nothing else did (found by
 * review: 138 stale private directories, a guest's files in them). So the host removes its own
 * on exit, and the next host process to start a Deno process removes those of hosts that died
 * (an `owner` file says which process made them; the name says nothing of the host to a guest).
 */
export const HOST_DIR_PREFIX = "cordon-deno-host-";
/** The layout before host directories: one `cordon-deno-fn-*` directory per process, in tmp. */
const LEGACY_PREFIX = "cordon-deno-fn-";
/** A directory without a readable owner this old is nobody's (its maker wrote the owner at once). */
const UNOWNED_GRACE_MS = 60_000;

interface Owner {
  pid: number;
  /** The process's start time (clock ticks since boot, /proc/<pid>/stat): a reused pid differs. */
  start: string;
  boot: string;
}

let hostDir: string | undefined;
/** Directories of this host's Deno processes that live, and how to end each process. */
const live = new Map<string, () => void>();
let sweep: Promise<number> | undefined;

/**
 * A fresh directory for one Deno process, under this host process's directory; removed on exit
 * if it is still there (killOnExit says how to end its process first).
 */
export async function processDir(): Promise<string> {
  let dir: string;
  try {
    dir = await mkdtemp(join(ownHostDir(), "p-"));
  } catch (error) {
    // Removed under us (a temp cleaner): make it again.
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    hostDir = undefined;
    dir = await mkdtemp(join(ownHostDir(), "p-"));
  }
  live.set(dir, () => {});
  return dir;
}

/** This host process's own directory (made on first use), where FIFOs are made ahead (fifos.ts). */
export function hostDirectory(): string {
  return ownHostDir();
}

/** On exit the host ends the process working in `dir` before it removes the directory. */
export function killOnExit(dir: string, kill: () => void): void {
  if (live.has(dir)) live.set(dir, kill);
}

/**
 * Removes a Deno process's directory once the process has ended: in the background, as a
 * synchronous removal held the host's thread for ~30 ms a process on a busy disk.
 */
export function releaseProcessDir(dir: string): void {
  live.delete(dir);
  rm(dir, { recursive: true, force: true, maxRetries: 2 }).catch(() => {});
}

function ownHostDir(): string {
  if (hostDir !== undefined) return hostDir;
  const dir = mkdtempSync(join(tmpdir(), HOST_DIR_PREFIX));
  const owner = selfOwner();
  if (owner) writeFileSync(join(dir, "owner"), JSON.stringify(owner), { mode: 0o600 });
  if (sweep === undefined) {
    process.once("exit", removeOnExit);
    sweep = sweepStaleHostDirs();
    sweep.catch(() => {});
  }
  hostDir = dir;
  return dir;
}

/** Synchronous (the event loop is over): end the processes, then remove every directory. */
function removeOnExit(): void {
  for (const kill of live.values()) {
    try {
      kill();
    } catch {}
  }
  for (const dir of live.keys()) {
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 2 });
    } catch {}
  }
  live.clear();
  if (hostDir !== undefined) {
    try {
      rmSync(hostDir, { recursive: true, force: true, maxRetries: 2 });
    } catch {}
  }
}

/**
 * Removes the host directories of host processes that have ended (and this user's directories
 * of the layout before them that no live process works in). Reads only names and small files
 * at start-up; the removals run in the background. Resolves to how many were removed.
 */
export async function sweepStaleHostDirs(tmp = tmpdir()): Promise<number> {
  const boot = bootId();
  if (boot === undefined) return 0; // not Linux: whether an owner lives cannot be told
  let names: string[];
  try {
    names = readdirSync(tmp);
  } catch {
    return 0;
  }
  const stale: string[] = [];
  const legacy: string[] = [];
  for (const name of names) {
    const isHost = name.startsWith(HOST_DIR_PREFIX);
    if (!isHost && !name.startsWith(LEGACY_PREFIX)) continue;
    const path = join(tmp, name);
    const stat = lstatSync(path, { throwIfNoEntry: false });
    if (!stat?.isDirectory() || stat.uid !== process.getuid?.()) continue;
    const old = Date.now() - stat.mtimeMs > UNOWNED_GRACE_MS;
    if (isHost) {
      const owner = readOwner(path);
      if (owner ? !alive(owner, boot) : old) stale.push(path);
    } else if (old) legacy.push(path);
  }
  // An old-layout directory is in use while a process works in it (its Deno process's cwd).
  if (legacy.length > 0) {
    const inUse = workingDirs();
    for (const path of legacy) if (!inUse.has(path)) stale.push(path);
  }
  await Promise.all(stale.map((path) => rm(path, { recursive: true, force: true }).catch(() => {})));
  return stale.length;
}

function readOwner(dir: string): Owner | undefined {
  try {
    const owner = JSON.parse(readFileSync(join(dir, "owner"), "utf8")) as Owner;
    return typeof owner.pid === "number" && typeof owner.start === "string" && typeof owner.boot === "string" ? owner : undefined;
  } catch {
    return undefined;
  }
}

/** Whether the process that wrote `owner` still runs: same boot, same pid, same start time. */
export function alive(owner: Owner, boot: string): boolean {
  if (owner.boot !== boot) return false;
  try {
    return startTime(owner.pid) === owner.start;
  } catch (error) {
    // Unreadable for another reason (hidepid): count it alive, never remove a live host's files.
    return (error as NodeJS.ErrnoException).code !== "ENOENT";
  }
}

function selfOwner(): Owner | undefined {
  const boot = bootId();
  if (boot === undefined) return undefined;
  try {
    return { pid: process.pid, start: startTime(process.pid), boot };
  } catch {
    return undefined;
  }
}

function startTime(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  // Field 22 (starttime), counted after the command name, which may hold spaces.
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
}

function bootId(): string | undefined {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "latin1").trim();
  } catch {
    return undefined;
  }
}

/** The working directories of this user's processes. */
function workingDirs(): Set<string> {
  const dirs = new Set<string>();
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      dirs.add(readlinkSync(`/proc/${pid}/cwd`));
    } catch {}
  }
  return dirs;
}
