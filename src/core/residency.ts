/** An idle warm instance, as the residency budget sees it. */
export interface Resident {
  readonly prefixKey: string;
  /** Heap in use, measured when the instance went idle. */
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
  private readonly idle = new Set<Resident>();

  constructor(readonly budgetBytes: number) {}

  get idleCount(): number {
    return this.idle.size;
  }

  get idleBytes(): number {
    let total = 0;
    for (const resident of this.idle) total += resident.heapBytes();
    return total;
  }

  /** Offer an instance going idle. Returns false when it must not be kept. */
  admit(resident: Resident): boolean {
    const needed = resident.heapBytes();
    if (needed > this.budgetBytes) return false;
    this.evictUntil(this.budgetBytes - needed);
    this.idle.add(resident);
    return true;
  }

  /** Heap figures changed: evict until the idle instances fit the budget again. */
  rebalance(): void {
    this.evictUntil(this.budgetBytes);
  }

  private evictUntil(limit: number): void {
    let used = this.idleBytes;
    if (used <= limit) return;
    const now = performance.now();
    const score = (r: Resident) => r.heapBytes() * (now - r.idleSince() + 1);
    for (const victim of [...this.idle].sort((a, b) => score(b) - score(a))) {
      if (used <= limit) break;
      used -= victim.heapBytes();
      this.idle.delete(victim);
      victim.evict();
    }
  }

  /** The instance left idleness (taken for a run, or disposed by its prefix). */
  leave(resident: Resident): void {
    this.idle.delete(resident);
  }
}
