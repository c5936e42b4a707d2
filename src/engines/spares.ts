import { CordonError } from "../core/errors.js";
import type { EngineInstance } from "./instance.js";

/** A one-off run on a spare takes about a millisecond; refill just after it. */
const REFILL_DELAY_MS = 2;
/** Instances a refill starts in one turn of the event loop. */
const REFILL_BATCH = 4;
/** The most spare instances a sandbox keeps (options.spareInstances): each holds a whole isolate. */
export const MAX_SPARES = 64;

/** A run waiting for a spare in the making (method syntax: instance types stay assignable). */
interface Waiter<I> {
  hand(instance: I | undefined): void;
}

/**
 * Spare instances created ahead of time, so a one-off run does not pay instance creation and
 * runtime bootstrap (about 3 ms for an isolate, more for QuickJS) on its critical path. Taking one starts a refill in the background.
 */
export class Spares<I extends EngineInstance = EngineInstance> {
  private readonly ready: I[] = [];
  private filling = 0;
  /** Runs waiting for a spare already being made: it is nearer done than a new one would be. */
  private readonly waiting: Waiter<I>[] = [];
  private scheduled = false;
  private disposed = false;
  /** One-off runs between `take` and their result (runStarted/runEnded). */
  private running = 0;
  /** A refill put off until no run is in progress (refillSoon). */
  private deferred = false;

  constructor(
    private readonly size: number,
    private readonly memoryMb: number,
    /** `ahead`: made in the background for later (worth warming up), not for a run waiting now. */
    private readonly create: (memoryMb: number, ahead: boolean) => Promise<I>,
  ) {
    this.refill();
  }

  get count(): number {
    return this.ready.length;
  }

  /** The spare the next `take` of the usual memory gets, if there is one. */
  peek(): I | undefined {
    return this.ready[this.ready.length - 1];
  }

  /**
   * A bootstrapped instance with no bindings: a spare when one fits, else a new one. A spare on
   * none of the `occupied` sites (EngineInstance.site) comes first.
   */
  async take(memoryMb: number, occupied?: ReadonlySet<object>): Promise<I> {
    if (this.disposed) throw disposedError();
    const spare = this.takeNow(memoryMb, occupied);
    if (spare) return spare;
    if (memoryMb === this.memoryMb && this.filling > this.waiting.length) {
      const made = await new Promise<I | undefined>((resolve) => this.waiting.push({ hand: resolve }));
      if (made) {
        this.refillSoon();
        return made;
      }
      // Handed nothing because the sandbox was disposed: no new instance outlives it.
      if (this.disposed) throw disposedError();
    }
    const instance = await this.create(memoryMb, false);
    if (this.disposed) {
      instance.dispose();
      throw disposedError();
    }
    return instance;
  }

  /** A spare that fits, at once; undefined when none is ready (then `take`, which waits or makes one). */
  takeNow(memoryMb: number, occupied?: ReadonlySet<object>): I | undefined {
    if (this.disposed || memoryMb !== this.memoryMb) return undefined;
    const spare = this.takeReady(occupied);
    // Refill after the run that took it is under way: creating an isolate blocks this thread
    // (`new Isolate`: 2.3-2.4 ms measured on a quiet machine, 2026-12-02), which must not land
    // on that run's critical path.
    if (spare) this.refillSoon();
    return spare;
  }

  /**
   * The newest spare that can run now, on none of the `occupied` sites if one is ready, else on
   * any. One lost while waiting (its QuickJS thread ended) is dropped: a run on it hung until its
   * wall time. One on a stalled thread stays for later: a run on it waited for the stuck guest and
   * failed with the thread (ERR_INSTANCE_RESET).
   */
  private takeReady(occupied?: ReadonlySet<object>): I | undefined {
    let newestOccupied: I | undefined;
    for (let i = this.ready.length - 1; i >= 0; i--) {
      const spare = this.ready[i];
      if (spare.disposed) this.ready.splice(i, 1);
      else if (spare.stalled?.()) continue;
      else if (spare.site === undefined || !occupied?.has(spare.site)) return this.ready.splice(i, 1)[0];
      else newestOccupied ??= spare;
    }
    if (newestOccupied) this.ready.splice(this.ready.indexOf(newestOccupied), 1);
    return newestOccupied;
  }

  /** A one-off run is starting: until one ends, a refill waits while a spare is still ready. */
  runStarted(): void {
    this.running++;
  }

  /**
   * Its result is out (its instance disposed): a refill put off meanwhile starts now, even with
   * other runs still in progress (under steady concurrent load it would otherwise wait until the
   * spares ran out).
   */
  runEnded(): void {
    this.running--;
    if (this.deferred) {
      this.deferred = false;
      this.refillSoon(true);
    }
  }

  /** `now`: a run just ended, nothing to wait for. */
  private refillSoon(now = false): void {
    // Making an instance takes the engine's threads and this thread's time: while a run is in
    // progress and a spare is still ready for the next one, it waits for the run's result
    // (measured, paced one-off runs on QuickJS: a refill 2 ms after the take landed on a run
    // that takes ~2 ms, beside it on a 2-core machine). With none ready it starts as before.
    if (!now && this.running > 0 && this.ready.length > 0) {
      this.deferred = true;
      return;
    }
    if (this.scheduled) return;
    this.scheduled = true;
    setTimeout(() => {
      this.scheduled = false;
      this.refill();
    }, REFILL_DELAY_MS);
  }

  private refill(): void {
    if (this.disposed) return;
    // In batches: creating an isolate blocks this thread for 2-3 ms (`new Isolate`, page faults
    // of V8 deserializing its heap), so a large pool is made over several turns of the event loop.
    let batch = REFILL_BATCH;
    while (this.ready.length + this.filling < this.size) {
      if (batch-- === 0) {
        this.refillSoon();
        return;
      }
      this.filling++;
      this.create(this.memoryMb, true).then(
        (instance) => {
          this.filling--;
          const waiter = this.waiting.shift();
          if (this.disposed) {
            instance.dispose();
            waiter?.hand(undefined);
          } else if (waiter) waiter.hand(instance);
          else this.ready.push(instance);
        },
        () => {
          this.filling--;
          // The waiter makes its own.
          this.waiting.shift()?.hand(undefined);
        },
      );
    }
  }

  dispose(): void {
    this.disposed = true;
    for (const waiter of this.waiting.splice(0)) waiter.hand(undefined);
    for (const instance of this.ready.splice(0)) instance.dispose();
  }
}

function disposedError(): CordonError {
  return new CordonError("ERR_INSTANCE_RESET", "the sandbox was disposed");
}
