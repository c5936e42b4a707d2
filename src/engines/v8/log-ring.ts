import { LOG_RING_LAYOUT } from "../guest/log-ring.js";
import type { LogSink } from "../instance.js";

const L = LOG_RING_LAYOUT;
const MASK = L.capacity - 1;
const MEMORY_BYTES = L.headerBytes + L.capacity * 2;

/**
 * The host side of an instance's log ring (engines/guest/log-ring.ts has the guest side and the
 * layout): the lines the guest's runtime wrote to shared memory instead of crossing. Read on
 * this thread at any time, the isolate running or not, and after it was disposed.
 *
 * The entries are the guest realm's writing: a guest that could reach the memory (it cannot:
 * only the runtime's closure holds it) could write anything. So every count is checked, and a
 * ring that does not add up is read no further.
 */
export class LogRing {
  readonly memory = new SharedArrayBuffer(MEMORY_BYTES);
  private readonly ctl = new Int32Array(this.memory, 0, L.headerBytes / 4);
  private readonly data = new Uint16Array(this.memory, L.headerBytes, L.capacity);
  private readonly bytes = Buffer.from(this.memory, L.headerBytes, L.capacity * 2);
  private broken = false;

  /** Hand each line written since the last read to `sink`, in order, and free their room. */
  drain(sink: LogSink): void {
    if (this.broken) return;
    const written = Atomics.load(this.ctl, 0);
    let read = this.ctl[1];
    while (read !== written) {
      const left = (written - read) | 0;
      const at = (offset: number) => this.data[(read + offset) & MASK];
      const length = at(1) + at(2) * 65536;
      const size = L.entryHeader + length;
      const level = L.levels[at(0)];
      if (left < 0 || left > L.capacity || size > left || length > L.maxLineChars || level === undefined) {
        this.broken = true;
        return;
      }
      const index = at(3) + at(4) * 65536;
      const epochMs = at(5) + at(6) * 65536 + at(7) * 4294967296;
      const message = this.text((read + L.entryHeader) & MASK, length);
      // Freed before it is handed on: a sink that throws loses that line, never repeats it, and
      // leaves the lines after it for the next read.
      read = (read + size) | 0;
      Atomics.store(this.ctl, 1, read);
      sink(level, message, index, epochMs);
    }
  }

  /** `length` UTF-16 units from `start`, wrapping around the end. */
  private text(start: number, length: number): string {
    const end = start + length;
    if (end <= L.capacity) return this.bytes.toString("utf16le", start * 2, end * 2);
    return this.bytes.toString("utf16le", start * 2) + this.bytes.toString("utf16le", 0, (end - L.capacity) * 2);
  }
}
