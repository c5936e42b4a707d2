/**
 * The guest side of the outbox (engines/v8/outbox.ts has the host side): what the runtime tells
 * the host without a crossing. On v8 every console line and every timer set or cleared used to
 * be a synchronous crossing to the host, each ~50 µs of the run's CPU charge (host-time.ts); a
 * warm call logging one line took 3x as long as a quiet one. The runtime writes them into shared
 * memory instead, and the host reads it whenever it looks at the run: when a guest task ends
 * (a timer set then is armed from the moment it was set), when something crosses, when a call
 * settles, and after a limit killed the guest. That last one is why lines are not simply batched
 * in the guest: `console.log("start"); for (;;) {}` must still report "start".
 *
 * One writer (this closure, on the isolate's thread), one reader (the host): a single-producer
 * ring. The writer fills an entry, then publishes it by moving the write count; the reader
 * moves the read count after copying entries out. What does not fit (a long line, or the ring
 * full because the host has not looked) returns false, and the runtime sends it the usual way:
 * the host empties the ring before it takes that, so everything keeps its order.
 *
 * SELF-CONTAINED: stringified into the guest runtime (bundle.ts). Everything it uses is captured
 * when the runtime starts, before any guest code; only this closure holds the shared memory.
 */

/**
 * The one definition both sides use (the stringified function gets it as an argument). Int32
 * ctl[4] first: [0] UTF-16 units written in all, [1] units read in all (both wrap at 2^32, hence
 * the power-of-two capacity); then `capacity` units of entries, which may wrap around the end.
 * Every entry starts with 8 units: [kind, a low, a high, b low, b high, time in ms (three 16-bit
 * parts, lowest first)]. A log line's kind is its level's place in `levels`, a is its length and
 * b its call index, and its UTF-16 units follow; a timer change's kind is `timerKind`, a its
 * delay in ms (0xFFFFFFFF: cleared) and b its id, and nothing follows.
 */
export const OUTBOX_LAYOUT = {
  headerBytes: 16,
  /** UTF-16 units of entries: 16 KB, about a hundred ordinary lines between two reads. */
  capacity: 8192,
  entryHeader: 8,
  /** Longer lines cross the usual way: isolated-vm's native copy is faster than this loop. */
  maxLineChars: 2048,
  levels: ["log", "info", "warn", "error", "debug"],
  timerKind: 5,
  /** A timer change's delay that says the timer was cleared. */
  cleared: 0xffffffff,
} as const;

export interface GuestOutbox {
  /** Write a log line; false when it must cross instead (no outbox, too long, full, unknown level). */
  log(level: string, message: string, index: number): boolean;
  /** Write a timer's change (`ms` < 0: cleared); false when it must cross instead. */
  timer(id: number, ms: number): boolean;
}

export function createOutbox(
  /** Captured before the web APIs remove `Atomics` from the guest's globals; QuickJS has none. */
  atomics: typeof Atomics | undefined,
  layout: typeof OUTBOX_LAYOUT,
  /** The host's shared memory (v8), taken from the global object at bootstrap; undefined elsewhere. */
  memory: SharedArrayBuffer | undefined,
): GuestOutbox {
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
  const ctl = atomics && memory ? new Int32(memory, 0, layout.headerBytes >> 2) : undefined;
  const data = atomics && memory ? new Uint16(memory, layout.headerBytes, capacity) : undefined;

  function levelCode(level: string): number {
    for (let i = 0; i < levels.length; i++) if (levels[i] === level) return i;
    return -1;
  }

  /**
   * Where an entry of `size` units goes, its header written; -1 when there is no room. Views
   * are used by element only, lengths come from the layout (never `.length` of a view: a
   * guest-patched accessor would be handed the view, and with it the shared memory).
   */
  function start(kind: number, a: number, b: number, size: number): number {
    if (ctl === undefined || data === undefined || !atomics) return -1;
    const written = atomics.load(ctl, 0);
    const used = (written - atomics.load(ctl, 1)) | 0;
    if (used < 0 || used + size > capacity) return -1;
    const at = now();
    data[written & mask] = kind;
    data[(written + 1) & mask] = a % 65536;
    data[(written + 2) & mask] = floor(a / 65536) % 65536;
    data[(written + 3) & mask] = b % 65536;
    data[(written + 4) & mask] = floor(b / 65536) % 65536;
    data[(written + 5) & mask] = at % 65536;
    data[(written + 6) & mask] = floor(at / 65536) % 65536;
    data[(written + 7) & mask] = floor(at / 4294967296) % 65536;
    return written;
  }

  /** Publish the entry at `written`: the host never reads a half-written one. */
  function publish(written: number, size: number): void {
    (atomics as typeof Atomics).store(ctl as Int32Array, 0, (written + size) | 0);
  }

  return {
    log(level, message, index) {
      const length = message.length;
      const code = levelCode(level);
      if (length > maxLineChars || code < 0 || !(index >= 0 && index <= 0xffffffff)) return false;
      const size = headerUnits + length;
      const written = start(code, length, index, size);
      if (written < 0) return false;
      const first = written + headerUnits;
      const units = data as Uint16Array;
      for (let i = 0; i < length; i++) units[(first + i) & mask] = apply(charCodeAt, message, [i]) as number;
      publish(written, size);
      return true;
    },
    timer(id, ms) {
      if (!(id >= 0 && id <= 0xffffffff) || !(ms < layout.cleared)) return false;
      const written = start(layout.timerKind, ms < 0 ? layout.cleared : floor(ms), id, headerUnits);
      if (written < 0) return false;
      publish(written, headerUnits);
      return true;
    },
  };
}
