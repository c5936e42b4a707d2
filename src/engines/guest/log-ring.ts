/**
 * The guest side of the log ring (engines/v8/log-ring.ts has the host side). On v8 every
 * console line used to be a synchronous crossing to the host: ~50 µs of a warm call's charge
 * and 3x its wall time here. The runtime writes lines into shared memory instead, and the host
 * reads them whenever it looks at the run: when a line crosses, when a call settles, and after
 * a limit killed the guest. That last one is why lines are not simply batched per turn in the
 * guest: `console.log("start"); for (;;) {}` must still report "start".
 *
 * One writer (this closure, on the isolate's thread), one reader (the host): a single-producer
 * ring. The writer fills an entry, then publishes it by moving the write count; the reader
 * moves the read count after copying entries out. A line that does not fit (too long, or the
 * ring full because the host has not looked) returns false, and the runtime sends it the usual
 * way: the host empties the ring before it takes that line, so lines keep their order.
 *
 * SELF-CONTAINED: stringified into the guest runtime (bundle.ts). Everything it uses is captured
 * when the runtime starts, before any guest code; only this closure holds the shared memory.
 */

/**
 * The one definition both sides use (the stringified function gets it as an argument). Int32
 * ctl[4] first: [0] UTF-16 units written in all, [1] units read in all (both wrap at 2^32, hence
 * the power-of-two capacity); then `capacity` units of entries. An entry: [level,
 * length low, length high, call index low, call index high, time in ms (three 16-bit parts,
 * lowest first)], then the line's UTF-16 units. An entry may wrap around the end.
 */
export const LOG_RING_LAYOUT = {
  headerBytes: 16,
  /** UTF-16 units of entries: 16 KB, about a hundred ordinary lines between two reads. */
  capacity: 8192,
  entryHeader: 8,
  /** Longer lines cross the usual way: isolated-vm's native copy is faster than this loop. */
  maxLineChars: 2048,
  levels: ["log", "info", "warn", "error", "debug"],
} as const;

export interface GuestLogRing {
  /** Use this shared memory from now on (the host's, passed once per instance). */
  attach(memory: SharedArrayBuffer): void;
  /** Write a line; false when it must cross instead (no ring, too long, full, unknown level). */
  write(level: string, message: string, index: number): boolean;
}

export function createLogRing(
  /** Captured before the web APIs remove `Atomics` from the guest's globals; QuickJS has none. */
  atomics: typeof Atomics | undefined,
  layout: typeof LOG_RING_LAYOUT,
): GuestLogRing {
  const Int32 = Int32Array;
  const Uint16 = Uint16Array;
  const apply = Reflect.apply;
  const charCodeAt = String.prototype.charCodeAt;
  const now = Date.now;
  const floor = Math.floor;
  const capacity = layout.capacity;
  const mask = capacity - 1;
  const headerUnits = layout.entryHeader;
  const maxLineChars = layout.maxLineChars;
  const levels = layout.levels;
  let ctl: Int32Array | undefined;
  let data: Uint16Array | undefined;

  function levelCode(level: string): number {
    for (let i = 0; i < levels.length; i++) if (levels[i] === level) return i;
    return -1;
  }

  return {
    attach(memory) {
      if (!atomics) return;
      ctl = new Int32(memory, 0, layout.headerBytes >> 2);
      data = new Uint16(memory, layout.headerBytes, capacity);
    },
    write(level, message, index) {
      // Views used by element only, lengths from the layout (never `.length` of a view: a
      // guest-patched accessor would be handed the view, and with it the shared memory).
      if (ctl === undefined || data === undefined || !atomics) return false;
      const length = message.length;
      const code = levelCode(level);
      if (length > maxLineChars || code < 0 || !(index >= 0 && index <= 0xffffffff)) return false;
      const written = atomics.load(ctl, 0);
      const used = (written - atomics.load(ctl, 1)) | 0;
      const size = headerUnits + length;
      if (used < 0 || used + size > capacity) return false;
      const at = now();
      data[written & mask] = code;
      data[(written + 1) & mask] = length & 0xffff;
      data[(written + 2) & mask] = length >>> 16;
      data[(written + 3) & mask] = index & 0xffff;
      data[(written + 4) & mask] = floor(index / 65536) & 0xffff;
      data[(written + 5) & mask] = at % 65536;
      data[(written + 6) & mask] = floor(at / 65536) % 65536;
      data[(written + 7) & mask] = floor(at / 4294967296) % 65536;
      const start = written + headerUnits;
      for (let i = 0; i < length; i++) data[(start + i) & mask] = apply(charCodeAt, message, [i]) as number;
      // Published only now: the host never reads a half-written entry.
      atomics.store(ctl, 0, (written + size) | 0);
      return true;
    },
  };
}
