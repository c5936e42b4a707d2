/**
 * When spinning for an answer stops paying: a polled answer that outlasts its window was held up
 * by a lost core (the thread computing it, or this one, was preempted), not by the guest. On a
 * loaded machine every polled answer then waited a scheduler's time slice, and polling made warm
 * calls many times slower than sleeping (measured here, load ~3 on 2 cores, calls back to back:
 * v8 served through shared memory p50 2.1–2.2 ms against 112–125 µs crossing the usual way;
 * QuickJS polled 1.2 ms against 0.2–0.3 ms). After such an answer the caller stops polling for a
 * back-off that doubles while it recurs.
 */
export class PollBackOff {
  private until = 0;
  private ms = 0;
  /** Tests of polling's own mechanics turn it off: a loaded test machine would (rightly) back off. */
  off = false;

  constructor(
    private readonly firstMs = 200,
    private readonly mostMs = 5000,
  ) {}

  /** An answer outlasted its polling window. */
  heldUp(now = performance.now()): void {
    if (this.off) return;
    // Recurring soon after the last back-off ended: twice as long; else from the first again.
    this.ms = now - this.until < this.ms ? Math.min(this.ms * 2, this.mostMs) : this.firstMs;
    this.until = now + this.ms;
  }

  /** Whether polling should wait now. */
  get active(): boolean {
    return !this.off && performance.now() < this.until;
  }

  /** Forget a back-off in progress. */
  reset(): void {
    this.until = 0;
    this.ms = 0;
  }
}
