import type { EngineInstance } from "./instance.js";

/**
 * Measure a used instance's heap at most this often, and at the latest this long after a call
 * (an extra round trip, off the hot path: a stream of calls pays ~4 a second per instance).
 */
const HEAP_SAMPLE_MS = 250;

/**
 * Keeps a warm pool's heap figures fresh for the residency budget: measured when an instance
 * warms up and after a run, and sampled in the background after calls, at most every
 * HEAP_SAMPLE_MS per instance.
 */
export class HeapSampler {
  /** When each instance's heap was last measured. */
  private readonly sampledAt = new WeakMap<EngineInstance, number>();
  /** Instances with a measurement scheduled (sample). */
  private readonly due = new WeakSet<EngineInstance>();

  /** `measured` is told of each background measurement (the budget counts it again). */
  constructor(private readonly measured: (instance: EngineInstance) => void) {}

  /** Measure now. */
  measure(instance: EngineInstance): Promise<number> {
    this.sampledAt.set(instance, performance.now());
    return instance.measureHeap();
  }

  /** Was `instance` measured within the last HEAP_SAMPLE_MS? */
  fresh(instance: EngineInstance): boolean {
    return performance.now() - (this.sampledAt.get(instance) ?? 0) < HEAP_SAMPLE_MS;
  }

  /**
   * Refresh a used instance's heap figure in the background (it stays available), at most every
   * HEAP_SAMPLE_MS and at the latest HEAP_SAMPLE_MS after its last use: a call may grow globals,
   * and the budget counts the figure (once every 16th use, a call that kept 40 MB went uncounted).
   */
  sample(instance: EngineInstance): void {
    if (this.due.has(instance)) return;
    const measure = () => {
      this.due.delete(instance);
      if (instance.disposed) return;
      void this.measure(instance).then(() => this.measured(instance));
    };
    const wait = (this.sampledAt.get(instance) ?? 0) + HEAP_SAMPLE_MS - instance.lastUsed;
    if (wait <= 0) {
      measure();
      return;
    }
    this.due.add(instance);
    setTimeout(measure, wait).unref();
  }
}
