/**
 * Work a worker defers until its answers are out: making a spare isolate blocks its thread for
 * 2-3 ms (`new Isolate` alone: 2.3-2.4 ms on a quiet machine), and the spares' refill timer (2 ms
 * after a run took one, engines/spares.ts) put that before the answer of any run that took
 * longer, on its critical path.
 *
 * Deferred work goes once nothing is in progress here (after the last answer's frame is written),
 * or when a request arrives: it may be a run waiting for that very spare (no deadlock), and a
 * worker kept busy by a stream of requests still gets its spares.
 */
export class AfterAnswers {
  private waiting: (() => void)[] = [];

  constructor(private readonly idle: () => boolean) {}

  /** Resolves at once when nothing is in progress, else at the first of the moments above. */
  wait(): Promise<void> {
    if (this.idle()) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** An answer was sent: its frame leaves in the next tick (corked), the deferred work after it. */
  answered(): void {
    if (this.waiting.length > 0 && this.idle()) setImmediate(() => this.release());
  }

  /** A request arrived. */
  heard(): void {
    if (this.waiting.length > 0) this.release();
  }

  private release(): void {
    for (const resolve of this.waiting.splice(0)) resolve();
  }
}
