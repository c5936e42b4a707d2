import type { EngineInstance } from "./instance.js";

/** A one-off run on a spare takes about a millisecond; refill just after it. */
const REFILL_DELAY_MS = 2;

/**
 * Spare instances created ahead of time, so a one-off run does not pay instance creation and
 * runtime bootstrap (about 3 ms for an isolate, more for QuickJS) on its critical path. Taking one starts a refill in the background.
 */
export class Spares<I extends EngineInstance = EngineInstance> {
  private readonly ready: I[] = [];
  private filling = 0;
  private scheduled = false;
  private disposed = false;

  constructor(
    private readonly size: number,
    private readonly memoryMb: number,
    private readonly create: (memoryMb: number) => Promise<I>,
  ) {
    this.refill();
  }

  get count(): number {
    return this.ready.length;
  }

  /** A bootstrapped instance with no bindings: a spare when one fits, else a new one. */
  async take(memoryMb: number): Promise<I> {
    if (memoryMb === this.memoryMb) {
      const spare = this.ready.pop();
      if (spare) {
        // Refill after the run that took it is under way: creating an isolate blocks this
        // thread for about a millisecond, which must not land on that run's critical path.
        this.refillSoon();
        return spare;
      }
    }
    return this.create(memoryMb);
  }

  private refillSoon(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setTimeout(() => {
      this.scheduled = false;
      this.refill();
    }, REFILL_DELAY_MS);
  }

  private refill(): void {
    if (this.disposed) return;
    while (this.ready.length + this.filling < this.size) {
      this.filling++;
      this.create(this.memoryMb).then(
        (instance) => {
          this.filling--;
          if (this.disposed) instance.dispose();
          else this.ready.push(instance);
        },
        () => {
          this.filling--;
        },
      );
    }
  }

  dispose(): void {
    this.disposed = true;
    for (const instance of this.ready.splice(0)) instance.dispose();
  }
}
