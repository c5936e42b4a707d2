import { type Dir, lstatSync, opendirSync, readlinkSync, statSync } from "node:fs";
import { join } from "node:path";

/** What a function's private directory may hold by default (`deno.diskMb`): its module files and what it writes. */
export const DEFAULT_DISK_MB = 64;
/** Files and directories a function's private directory may hold, its module files included. */
export const MAX_DISK_ENTRIES = 10_000;
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

/**
 * The bound on a Deno process's private directory, the one place it may write. Linux has no
 * per-directory accounting without root (quotas, a tmpfs mount), so the directory is measured:
 * walked whenever the bytes the process wrote since the last walk could have taken it past its
 * limit (a copy counts: the kernel adds copy_file_range to `wchar`), and whenever it used CPU
 * (empty files and directories cost no bytes to write, only the system calls that make them).
 * A file the guest deleted but holds open keeps its blocks where no walk sees them (found by
 * review: +600 MB under a 16 MB limit), so the process's open deleted files are counted too.
 * Between two polls a guest can still write what the disk takes in that time: see the README.
 */
export class DiskWatch {
  /** `writtenBytes` when the last walk started, and what that walk measured. */
  private writtenAtWalk = 0;
  private measuredBytes = 0;
  private cpuAtWalk = 0n;
  private lastWalk = -Infinity;
  private walking = false;
  /** What the directory held when the process started (Deno's own): not the guest's. */
  private base = { bytes: 0, entries: 0 };
  stopped = false;

  constructor(
    private readonly dir: string,
    readonly limitBytes: number,
    /** Called once, with why, when the directory is over its limit. */
    private readonly over: (why: string) => void,
    /** The process whose open files count (its deleted ones hold blocks outside the directory's listing). */
    private readonly pid?: () => number,
  ) {}

  /** Measures the directory now as what the process started with; polls wait for it. */
  async takeBase(): Promise<void> {
    this.walking = true;
    try {
      this.base = await measureDir(this.dir, 2 ** 40, MAX_DISK_ENTRIES);
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
    const mayHold = this.measuredBytes + (written - this.writtenAtWalk);
    const busy = reading.cpuNs - this.cpuAtWalk >= WALK_CPU_NS && now - this.lastWalk >= WALK_EVERY_MS;
    if (mayHold <= this.limitBytes && !busy) return undefined;
    this.walking = true;
    this.writtenAtWalk = written;
    this.cpuAtWalk = reading.cpuNs;
    this.lastWalk = now;
    return this.measure().then(
      ({ dirBytes, heldBytes, entries, openFiles }) => {
        this.walking = false;
        if (this.stopped) return;
        this.measuredBytes = dirBytes + heldBytes;
        const limit = mb(this.limitBytes);
        let why: string | undefined;
        if (dirBytes > this.limitBytes) why = `its private directory holds more than ${limit} MB`;
        else if (dirBytes + heldBytes > this.limitBytes)
          why = `its private directory and the files it deleted but keeps open hold more than ${limit} MB`;
        else if (entries > MAX_DISK_ENTRIES)
          why = `its private directory holds more than ${MAX_DISK_ENTRIES} files and directories`;
        else if (openFiles > MAX_OPEN_FILES) why = `it holds more than ${MAX_OPEN_FILES} files open`;
        if (why === undefined) return;
        this.stopped = true;
        this.over(`over its disk limit (${why})`);
      },
      // The process went away; nothing to bound.
      () => {
        this.walking = false;
      },
    );
  }

  private async measure(): Promise<{ dirBytes: number; heldBytes: number; entries: number; openFiles: number }> {
    let dir = { bytes: 0, entries: 0 };
    try {
      const { bytes, entries } = await measureDir(
        this.dir,
        this.limitBytes + this.base.bytes,
        MAX_DISK_ENTRIES + this.base.entries,
      );
      dir = { bytes: Math.max(0, bytes - this.base.bytes), entries: Math.max(0, entries - this.base.entries) };
    } catch (error) {
      // A guest may remove its own directory; what it still holds open counts all the same.
      if (this.pid === undefined) throw error;
    }
    if (this.pid === undefined || dir.bytes > this.limitBytes || dir.entries > MAX_DISK_ENTRIES) {
      return { dirBytes: dir.bytes, heldBytes: 0, entries: dir.entries, openFiles: 0 };
    }
    const held = await measureDeletedOpenFiles(this.pid(), MAX_OPEN_FILES);
    return { dirBytes: dir.bytes, heldBytes: held.bytes, entries: dir.entries, openFiles: held.fds };
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
