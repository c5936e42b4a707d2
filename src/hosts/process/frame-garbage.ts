import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/** Frames this large are counted: their text and bytes are large objects, freed only by a full collection. */
const LARGE_FRAME_BYTES = 256 * 1024;
/** A full collection at least this often, in large frames' bytes, however busy the worker is. */
const COLLECT_EVERY_BYTES = 64 * 1024 * 1024;
/** Once no request is in progress, a collection if this much has passed since the last one. */
const COLLECT_IDLE_BYTES = 8 * 1024 * 1024;

/**
 * A worker's garbage from large frames, collected in step with them. Every large frame leaves
 * its text and its bytes behind once read or written, and nothing in a quiet worker makes V8
 * collect them: after four runs sent 240 host calls of 1 MB, the worker stayed at 550 MB resident
 * (247 MB of strings, 236 MB of frame buffers; 70 MB once collected). The host's budget had
 * dropped with those runs' answers, so the watchdog killed the worker and failed the one innocent
 * run left in it with ERR_MEMORY_LIMIT. Collected every COLLECT_EVERY_BYTES, and when the worker
 * goes idle, such garbage stays a fraction of the budget's slack.
 *
 * Guests never run in this context (their isolates and runtimes are elsewhere), and no context
 * made after this one gets `gc`.
 */
export class FrameGarbage {
  private bytes = 0;
  private scheduled = false;
  private readonly collect: (() => void) | undefined;

  constructor(private readonly idle: () => boolean) {
    // The flag is the process's: every context made while it is set gets `gc`, guests' isolates
    // included (found: `typeof gc` read "function" in a guest). Set for this one context only.
    setFlagsFromString("--expose-gc");
    let gc: unknown;
    try {
      gc = runInNewContext("typeof gc === 'function' ? gc : undefined");
    } finally {
      setFlagsFromString("--no-expose-gc");
    }
    this.collect = typeof gc === "function" ? (gc as () => void) : undefined;
  }

  /** A frame of `bytes` was read or written. */
  moved(bytes: number): void {
    if (bytes < LARGE_FRAME_BYTES) return;
    this.bytes += bytes;
    if (this.bytes >= COLLECT_EVERY_BYTES) this.schedule();
  }

  /** An answer was sent: once nothing is in progress, what the requests moved is garbage. */
  answered(): void {
    if (this.bytes >= COLLECT_IDLE_BYTES && this.idle()) this.schedule();
  }

  /** On a later turn: after the answers of this one are written. */
  private schedule(): void {
    if (this.scheduled || !this.collect) return;
    this.scheduled = true;
    this.bytes = 0;
    setImmediate(() => {
      this.scheduled = false;
      this.collect?.();
    });
  }
}
