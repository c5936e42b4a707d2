/** An idle warm instance, as the residency budget sees it. */
export interface Resident {
  readonly prefixKey: string;
  /** Heap in use: measured before a prefix run's instance goes idle, after a call soon after (WarmPool.sampleHeap). */
  heapBytes(): number;
  idleSince(): number;
  /** Drop the instance: it leaves its prefix's idle list and is disposed. */
  evict(): void;
}

/**
 * The warm residency budget: idle instances, across every prefix, may hold at most `budgetBytes`
 * of heap. When an instance goes idle past the budget, the idle instances with the highest
 * heap used × idle time are evicted first; an instance that still does not fit is not kept (the
 * next run of its prefix is simply cold).
 */
export class Residency {
  /** Each idle instance and the heap it was counted with: admit and leave keep `total` in step. */
  private readonly idle = new Map<Resident, number>();
  private total = 0;

  constructor(readonly budgetBytes: number) {}

  get idleCount(): number {
    return this.idle.size;
  }

  /** Heap of the idle instances, as counted when each went idle (or at their last recount). */
  get idleBytes(): number {
    return this.total;
  }

  /** Offer an instance going idle: O(1) unless the budget is full. Returns false when it must not be kept. */
  admit(resident: Resident): boolean {
    const needed = resident.heapBytes();
    if (needed > this.budgetBytes) return false;
    this.evictUntil(this.budgetBytes - needed);
    this.idle.set(resident, needed);
    this.total += needed;
    return true;
  }

  /** One idle instance's heap was measured again: count it anew, and evict until the budget fits. */
  recount(resident: Resident): void {
    const counted = this.idle.get(resident);
    if (counted === undefined) return;
    const bytes = resident.heapBytes();
    this.idle.set(resident, bytes);
    this.total += bytes - counted;
    if (bytes > this.budgetBytes) {
      // Alone past the budget: not kept, as admit would have refused it.
      this.leave(resident);
      resident.evict();
      return;
    }
    this.evictUntil(this.budgetBytes);
  }

  /**
   * Evict the idle instance with the highest heap used × idle time, if any: a process host worker
   * nearing its memory budget sheds them one at a time (what one frees in resident size is not
   * its heap: a typed array it keeps is outside it). Returns the heap evicted.
   */
  shedOne(): number {
    const now = performance.now();
    let victim: Resident | undefined;
    let most = -1;
    for (const [resident, bytes] of this.idle) {
      const score = bytes * (now - resident.idleSince() + 1);
      if (score > most) {
        most = score;
        victim = resident;
      }
    }
    if (!victim) return 0;
    const bytes = this.idle.get(victim) ?? 0;
    this.leave(victim);
    victim.evict();
    return bytes;
  }

  private evictUntil(limit: number): void {
    if (this.total <= limit) return;
    const now = performance.now();
    const score = (r: Resident) => (this.idle.get(r) ?? 0) * (now - r.idleSince() + 1);
    for (const victim of [...this.idle.keys()].sort((a, b) => score(b) - score(a))) {
      if (this.total <= limit) break;
      this.leave(victim);
      victim.evict();
    }
  }

  /** The instance left idleness (taken for a run, or disposed by its prefix). */
  leave(resident: Resident): void {
    const counted = this.idle.get(resident);
    if (counted === undefined) return;
    this.idle.delete(resident);
    this.total -= counted;
  }
}
