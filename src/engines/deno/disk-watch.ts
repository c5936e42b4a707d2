import { type Dir, lstatSync, opendirSync, readlinkSync, statSync } from "node:fs";
import { join } from "node:path";

/** What a function's private directory may hold by default (`deno.diskMb`): its module files and what it writes. */
export const DEFAULT_DISK_MB = 64;
/** Files and directories a function's private directory may hold, its module files included. */
export const MAX_DISK_ENTRIES = 10_000;
/**
 * Deno's cache of a process's modules may hold this much, or the disk limit if larger: it grows
 * in steps of up to 4 MB (SQLite folds its 4 MB log into the database), and a benign function
 * with a 120 KB module adds 300 KB a run.
 */
export const MIN_CACHE_BYTES = 64 * 1048576;
/** Descriptors a process may hold open: each is read to find deleted files, so their number is bounded too. */
export const MAX_OPEN_FILES = 10_000;
/** A process that used this much CPU since the last measurement is measured again (files cost CPU to make, not bytes)... */
const WALK_CPU_NS = 100_000_000n;
/** ...at most this often. */
const WALK_EVERY_MS = 250;

export interface DiskReading {
  /** Bytes the process has written to anything but its protocol pipes (/proc/<pid>/io `wchar` less them); undefined when unreadable. */
  writtenBytes: number | undefined;
  cpuNs: bigint;
}

/** Deno's cache of the guest's modules (deno-dir.ts): past its soft bound the process is retired after its run. */
export interface CacheWatch {
  dir: string;
  /** Called once when the cache holds more than half the limit. */
  worn: () => void;
}

interface Measured {
  /** The private directory's bytes and those of the files it deleted but holds open. */
  guestBytes: number;
  heldBytes: number;
  /** What Deno's cache grew by since the process started. */
  cacheBytes: number;
  entries: number;
  openFiles: number;
}

/**
 * The bound on what a Deno process keeps on disk: its private directory, the one place the guest
 * may write, and what Deno caches of the guest's modules in the process's own DENO_DIR. Linux has
 * no per-directory accounting without root (quotas, a tmpfs mount), so both are measured: walked
 * whenever the bytes the process wrote since the last walk could have taken either past its
 * bound (a copy counts: the kernel adds copy_file_range to `wchar`), and whenever it used CPU
 * (empty files and directories cost no bytes to write, only the system calls that make them).
 * A file the guest deleted but holds open keeps its blocks where no walk sees them (found by
 * review: +600 MB under a 16 MB limit), so the process's open deleted files are counted too.
 * Between two polls a guest can still write what the disk takes in that time: see the README.
 *
 * The cache is bounded apart, by MIN_CACHE_BYTES or the limit: every module-form run adds a
 * code-cache entry for its module (1.5-2.5x its size), so a benign function fills it over hundreds
 * of runs. Past half of it the process serves no further run (a new one starts afresh); past all
 * of it, the run fails.
 */
export class DiskWatch {
  /** `writtenBytes` when the last walk started, and what that walk measured. */
  private writtenAtWalk = 0;
  private measured: Measured = { guestBytes: 0, heldBytes: 0, cacheBytes: 0, entries: 0, openFiles: 0 };
  private cpuAtWalk = 0n;
  private lastWalk = -Infinity;
  private walking = false;
  /** What the cache held when the process was ready (Deno's own, the seed): not the guest's. */
  private base = { bytes: 0, entries: 0 };
  private worn = false;
  private readonly cacheLimit: number;
  stopped = false;

  constructor(
    private readonly dir: string,
    readonly limitBytes: number,
    /** Called once, with why, when the process is over its limit. */
    private readonly over: (why: string) => void,
    /** The process whose open files count (its deleted ones hold blocks outside the directory's listing). */
    private readonly pid?: () => number,
    private readonly cache?: CacheWatch,
  ) {
    this.cacheLimit = Math.max(limitBytes, MIN_CACHE_BYTES);
  }

  /** Measures the cache now as what the process started with; polls wait for it. */
  async takeBase(): Promise<void> {
    if (this.cache === undefined) return;
    this.walking = true;
    try {
      this.base = await measureDir(this.cache.dir, 2 ** 40, MAX_DISK_ENTRIES);
    } catch {
      // Gone with its process: nothing to bound.
    } finally {
      this.walking = false;
    }
  }

  /** Called on every poll of the process (the RSS watchdog's). Returns the measurement it started, if any. */
  poll(reading: DiskReading, now: number): Promise<void> | undefined {
    if (this.walking || this.stopped) return undefined;
    const written = reading.writtenBytes ?? this.writtenAtWalk;
    const since = written - this.writtenAtWalk;
    const { guestBytes, heldBytes, cacheBytes } = this.measured;
    const cacheBound = this.worn ? this.cacheLimit : this.cacheLimit / 2;
    const mayPass =
      guestBytes + heldBytes + since > this.limitBytes || (this.cache !== undefined && cacheBytes + since > cacheBound);
    const busy = reading.cpuNs - this.cpuAtWalk >= WALK_CPU_NS && now - this.lastWalk >= WALK_EVERY_MS;
    if (!mayPass && !busy) return undefined;
    this.walking = true;
    this.writtenAtWalk = written;
    this.cpuAtWalk = reading.cpuNs;
    this.lastWalk = now;
    return this.measure().then(
      (measured) => {
        this.walking = false;
        if (this.stopped) return;
        this.measured = measured;
        const why = this.overBy(measured);
        if (why !== undefined) {
          this.stopped = true;
          this.over(`over its disk limit (${why})`);
        } else if (!this.worn && measured.cacheBytes > this.cacheLimit / 2) {
          this.worn = true;
          this.cache?.worn();
        }
      },
      // The process went away; nothing to bound.
      () => {
        this.walking = false;
      },
    );
  }

  private overBy({ guestBytes, heldBytes, cacheBytes, entries, openFiles }: Measured): string | undefined {
    const limit = mb(this.limitBytes);
    if (guestBytes > this.limitBytes) return `its private directory holds more than ${limit} MB`;
    if (guestBytes + heldBytes > this.limitBytes)
      return `its private directory and the files it deleted but keeps open hold more than ${limit} MB`;
    if (cacheBytes > this.cacheLimit) return `Deno's cache of its modules holds more than ${mb(this.cacheLimit)} MB`;
    if (entries > MAX_DISK_ENTRIES) return `its private directory holds more than ${MAX_DISK_ENTRIES} files and directories`;
    if (openFiles > MAX_OPEN_FILES) return `it holds more than ${MAX_OPEN_FILES} files open`;
    return undefined;
  }

  private async measure(): Promise<Measured> {
    const measured: Measured = { guestBytes: 0, heldBytes: 0, cacheBytes: 0, entries: 0, openFiles: 0 };
    try {
      const guest = await measureDir(this.dir, this.limitBytes, MAX_DISK_ENTRIES);
      measured.guestBytes = guest.bytes;
      measured.entries = guest.entries;
    } catch (error) {
      // A guest may remove its own directory; what it still holds open counts all the same.
      if (this.pid === undefined) throw error;
    }
    if (this.overBy(measured) !== undefined) return measured;
    if (this.cache !== undefined) {
      const { bytes, entries } = await measureDir(this.cache.dir, this.cacheLimit + this.base.bytes, MAX_DISK_ENTRIES);
      measured.cacheBytes = Math.max(0, bytes - this.base.bytes);
      // Transpiled TypeScript is a file each: its entries count with the guest's.
      measured.entries += Math.max(0, entries - this.base.entries);
      if (this.overBy(measured) !== undefined) return measured;
    }
    if (this.pid !== undefined) {
      const held = await measureDeletedOpenFiles(this.pid(), MAX_OPEN_FILES);
      measured.heldBytes = held.bytes;
      measured.openFiles = held.fds;
    }
    return measured;
  }
}

/**
 * Bytes on disk (allocated blocks: a sparse file costs what it holds) and entries under `dir`,
 * a hard-linked file counted once. Stops early past either bound: a directory of a million empty
 * files must not cost the host a million `lstat`s. Synchronous calls in slices of SLICE entries
 * with a turn of the event loop between them: ~3 us an entry where the promise API's thread-pool
 * round trip took ~55 us, and no slice holds the host's thread for long.
 */
export async function measureDir(dir: string, maxBytes: number, maxEntries: number): Promise<{ bytes: number; entries: number }> {
  let bytes = 0;
  let entries = 0;
  const seen = new Set<string>();
  const pending = [dir];
  while (pending.length > 0) {
    const current = pending.pop() as string;
    let handle: Dir;
    try {
      handle = opendirSync(current, { bufferSize: SLICE });
    } catch (error) {
      // Removed by the guest during the walk; the top directory missing is the caller's to know.
      if (current === dir) throw error;
      continue;
    }
    try {
      for (let entry = handle.readSync(); entry !== null; entry = handle.readSync()) {
        entries++;
        if (entries > maxEntries) return { bytes, entries };
        if (entries % SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
        const path = join(current, entry.name);
        const stat = lstatSync(path, { throwIfNoEntry: false });
        if (stat === undefined) continue; // removed since it was listed
        if (stat.nlink > 1) {
          const id = `${stat.dev}:${stat.ino}`;
          if (seen.has(id)) continue;
          seen.add(id);
        }
        bytes += stat.blocks * 512;
        if (bytes > maxBytes) return { bytes, entries };
        if (stat.isDirectory()) pending.push(path);
      }
    } finally {
      handle.closeSync();
    }
  }
  return { bytes, entries };
}

/**
 * Allocated bytes of the regular files process `pid` holds open that have no name left
 * (`/proc/<pid>/fd/N -> "... (deleted)"`, no link anywhere), each inode once; and how many
 * descriptors it holds, counting stopped past `maxFds`. Sliced like measureDir.
 */
export async function measureDeletedOpenFiles(pid: number, maxFds: number): Promise<{ bytes: number; fds: number }> {
  const fdDir = `/proc/${pid}/fd`;
  let handle: Dir;
  try {
    handle = opendirSync(fdDir, { bufferSize: SLICE });
  } catch {
    return { bytes: 0, fds: 0 }; // gone, or not Linux
  }
  let bytes = 0;
  let fds = 0;
  const seen = new Set<string>();
  try {
    for (let entry = handle.readSync(); entry !== null; entry = handle.readSync()) {
      fds++;
      if (fds > maxFds) break;
      if (fds % SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
      const path = `${fdDir}/${entry.name}`;
      let target: string;
      try {
        target = readlinkSync(path);
      } catch {
        continue; // closed since it was listed
      }
      if (!target.endsWith(" (deleted)")) continue;
      // stat through the descriptor's link reaches the open inode itself.
      const stat = statSync(path, { throwIfNoEntry: false });
      if (stat === undefined || !stat.isFile() || stat.nlink > 0) continue;
      const id = `${stat.dev}:${stat.ino}`;
      if (seen.has(id)) continue;
      seen.add(id);
      bytes += stat.blocks * 512;
    }
  } finally {
    handle.closeSync();
  }
  return { bytes, fds };
}

const SLICE = 256;

function mb(bytes: number): number {
  return Math.round(bytes / 1048576);
}
