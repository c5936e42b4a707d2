/**
 * Run slots: at most `max` runs execute at once, at most `maxQueued` wait. A run past the queue
 * is refused at once (the caller turns that into ERR_QUEUE_FULL), never left to wait unbounded.
 */
export class Slots {
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  /** Refusing everything: the sandbox is being disposed. */
  private closed = false;
  private readonly refusals: Array<() => void> = [];

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
    if (this.closed) return false;
    if (this.active < this.max) {
      this.active++;
      return true;
    }
    if (this.waiting.length >= this.maxQueued) return false;
    return new Promise<boolean>((resolve) => {
      const grant = () => {
        signal?.removeEventListener("abort", onAbort);
        this.active++;
        resolve(true);
      };
      const onAbort = () => {
        const index = this.waiting.indexOf(grant);
        if (index >= 0) this.waiting.splice(index, 1);
        const refusal = this.refusals.indexOf(onAbort);
        if (refusal >= 0) this.refusals.splice(refusal, 1);
        resolve(false);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(grant);
      this.refusals.push(onAbort);
    });
  }

  /** Refuse every waiting run and every later one (the sandbox is being disposed). */
  close(): void {
    this.closed = true;
    this.waiting.length = 0;
    for (const refuse of this.refusals.splice(0)) refuse();
  }

  release(): void {
    this.active--;
    const next = this.waiting.shift();
    if (next) {
      this.refusals.shift();
      next();
    }
  }
}
