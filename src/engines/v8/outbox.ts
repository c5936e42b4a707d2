import { MAX_TIMER_MS } from "../../core/limits.js";
import { OUTBOX_LAYOUT } from "../guest/outbox.js";
import type { OutboxReader } from "../instance.js";

const L = OUTBOX_LAYOUT;
const MASK = L.capacity - 1;
const MEMORY_BYTES = L.headerBytes + L.capacity * 2;

/**
 * The host side of an instance's outbox (engines/guest/outbox.ts has the guest side and the
 * layout): the log lines and timer changes the guest's runtime wrote to shared memory instead of
 * crossing. Read on this thread at any time, the isolate running or not, and after it was disposed.
 *
 * The entries are the guest realm's writing: a guest that could reach the memory (it cannot:
 * only the runtime's closure holds it) could write anything. So every count is checked, and an
 * outbox that does not add up is read no further.
 */
export class Outbox {
  readonly memory = new SharedArrayBuffer(MEMORY_BYTES);
  private readonly ctl = new Int32Array(this.memory, 0, L.headerBytes / 4);
  private readonly data = new Uint16Array(this.memory, L.headerBytes, L.capacity);
  private readonly bytes = Buffer.from(this.memory, L.headerBytes, L.capacity * 2);
  private broken = false;

  /** Hand each entry written since the last read to `reader`, in order, and free their room. */
  drain(reader: OutboxReader): void {
    if (this.broken) return;
    const written = Atomics.load(this.ctl, 0);
    let read = this.ctl[1];
    while (read !== written) {
      const left = (written - read) | 0;
      const at = (offset: number) => this.data[(read + offset) & MASK];
      const kind = at(0);
      const a = at(1) + at(2) * 65536;
      const b = at(3) + at(4) * 65536;
      const epochMs = at(5) + at(6) * 65536 + at(7) * 4294967296;
      const timer = kind === L.timerKind;
      const size = timer ? L.entryHeader : L.entryHeader + a;
      const level = L.levels[kind];
      const fits = left > 0 && left <= L.capacity && size <= left;
      const valid = timer ? a <= MAX_TIMER_MS || a === L.cleared : level !== undefined && a <= L.maxLineChars;
      if (!fits || !valid) {
        this.broken = true;
        return;
      }
      const message = timer ? "" : this.text((read + L.entryHeader) & MASK, a);
      // Freed before it is handed on: a reader that throws loses that entry, never repeats it,
      // and leaves the entries after it for the next read.
      read = (read + size) | 0;
      Atomics.store(this.ctl, 1, read);
      if (timer) reader.timer(b, a === L.cleared ? -1 : a, epochMs);
      else reader.log(level, message, b, epochMs);
    }
  }

  /** `length` UTF-16 units from `start`, wrapping around the end. */
  private text(start: number, length: number): string {
    const end = start + length;
    if (end <= L.capacity) return this.bytes.toString("utf16le", start * 2, end * 2);
    return this.bytes.toString("utf16le", start * 2) + this.bytes.toString("utf16le", 0, (end - L.capacity) * 2);
  }
}
