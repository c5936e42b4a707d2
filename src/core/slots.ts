import { signalAborted } from "./abort-reason.js";
import { onAbort } from "./abort-listeners.js";

/**
 * Slots: at most `max` holders at once, at most `maxQueued` waiting, in order. A request past the
 * queue is refused at once (for runs the caller turns that into ERR_QUEUE_FULL), never left to
 * wait unbounded. Run slots use it, and so does the brokered fetch (its exchanges in flight).
 */
export class Slots {
  private active = 0;
  private readonly waiting: { grant(): void; refuse(): void }[] = [];
  /** Refusing everything: the sandbox is being disposed. */
  private closed = false;

  constructor(
    private readonly max: number,
    private readonly maxQueued: number,
  ) {}

  get activeCount(): number {
    return this.active;
  }

  get queueDepth(): number {
    return this.waiting.length;
  }

  /** Resolves true once a slot is held; false when the queue is full or the signal aborts first. */
  acquire(signal?: AbortSignal): Promise<boolean> | boolean {
    // An aborted signal never fires "abort" again: a waiter listening for it would wait for a slot.
    if (this.closed || signalAborted(signal)) return false;
    if (this.active < this.max) {
      this.active++;
      return true;
    }
    if (this.waiting.length >= this.maxQueued) return false;
    return new Promise<boolean>((resolve) => {
      let stopWatching: (() => void) | undefined;
      const waiter = {
        grant: () => {
          stopWatching?.();
          this.active++;
          resolve(true);
        },
        refuse: () => {
          const index = this.waiting.indexOf(waiter);
          if (index >= 0) this.waiting.splice(index, 1);
          resolve(false);
        },
      };
      if (signal) stopWatching = onAbort(signal, waiter.refuse);
      this.waiting.push(waiter);
    });
  }

  /** Refuse every waiting request and every later one (the sandbox is being disposed). */
  close(): void {
    this.closed = true;
    for (const waiter of [...this.waiting]) waiter.refuse();
  }

  release(): void {
    this.active--;
    this.waiting.shift()?.grant();
  }
}
