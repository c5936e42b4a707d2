import { heldBytesOf, ReleasingMemory, type RssRule, rssBudget, SHED_CHECK_MS, shedLine } from "./rss-budget.js";

/** What the shedder needs of the worker's engine. */
export interface SheddingEngine {
  readonly idleHeapBytes: number;
  shedIdle(): number;
}

export interface ShedderOptions {
  rule: RssRule;
  /** The residency budget (memoryBudgetMb) and instances a prefix may keep, as the host counts them. */
  budgetBytes: number;
  maxInstances: number;
  /** This process's resident size now. */
  readRss?: () => number;
}

/**
 * A worker's side of its memory budget: it tracks what the host counts (requests in flight, the
 * prefixes it holds, its idle warm heap) and, past the shed line (rss-budget.ts), evicts idle warm
 * instances, highest heap × idle time first, before the watchdog's budget is reached. The
 * watchdog still kills a worker whose runs take it past the budget: only warm state is shed here.
 */
export class Shedder {
  private base = 0;
  private readonly inFlight = new Map<number, number>();
  private inFlightTotal = 0;
  /** One-off runs answered a moment ago, counted as the host counts them (rss-budget.ts). */
  private readonly releasing = new ReleasingMemory();
  private readonly held = new Map<number, { memory: number; kept: number }>();
  private memoryTotal = 0;
  private keptTotal = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The resident size at the last look (check), while idle warm instances were there to shed. */
  private lastRss: number | undefined;
  /** Heap shed so far (for tests and stats). */
  shedBytes = 0;

  constructor(
    private readonly engine: SheddingEngine,
    private readonly options: ShedderOptions,
  ) {}

  /** The worker is ready with resident size `base`, the host's calibrated base: start looking. */
  start(base: number): void {
    this.base = base;
    this.timer = setInterval(() => this.check(), SHED_CHECK_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Request `id` (a run, call or prepare) may use `memoryMb` until it is answered. */
  began(id: number, memoryMb: number): void {
    const bytes = memoryMb * 1024 * 1024;
    this.inFlight.set(id, bytes);
    this.inFlightTotal += bytes;
  }

  /**
   * Request `id` is answered: once the host reads the answer, its memory leaves the budget, and the
   * watchdog may look before the next timed look here (a prepare that made an instance keeping an
   * 8 MB typed array got its worker killed so): the shed line is checked now, before the answer goes.
   * A one-off run's memory leaves it ONE_OFF_RELEASE_MS later, as on the host (its instance is
   * disposed after the answer).
   */
  answered(id: number, oneOff = false): void {
    const bytes = this.inFlight.get(id) ?? 0;
    this.inFlightTotal -= bytes;
    this.inFlight.delete(id);
    if (oneOff) this.releasing.add(bytes);
    // Reading the resident size costs 10-35 µs (a /proc read), on every warm call's answer. It is
    // skipped while the last look (at most SHED_CHECK_MS old) was as far again under the line as
    // the line is under the budget: what a run allocates before the next look has that room.
    if (this.lastRss === undefined) {
      this.check();
      return;
    }
    const budget = this.budget();
    const line = shedLine(this.options.rule, budget, this.base);
    if (this.lastRss < line - (budget - line)) return;
    this.shedPast(line);
  }

  /** Prefix `handle` is held, prepared with `memoryMb` from `prepare` (what it keeps counts as the host counts it). */
  holding(handle: number, memoryMb: number, prepare: Parameters<typeof heldBytesOf>[0]): void {
    const entry = { memory: memoryMb * 1024 * 1024, kept: heldBytesOf(prepare) };
    this.held.set(handle, entry);
    this.memoryTotal += entry.memory;
    this.keptTotal += entry.kept;
  }

  dropped(handle: number): void {
    const entry = this.held.get(handle);
    if (!entry) return;
    this.held.delete(handle);
    this.memoryTotal -= entry.memory;
    this.keptTotal -= entry.kept;
  }

  /** The budget the host's watchdog holds this worker to, as the host computes it (pool.ts). */
  budget(): number {
    const { rule, budgetBytes, maxInstances } = this.options;
    const warmHeap = Math.min(this.engine.idleHeapBytes, budgetBytes, this.memoryTotal * maxInstances);
    const inFlight = this.inFlightTotal + this.releasing.bytes();
    return rssBudget(rule, { base: this.base, inFlight, warmHeap, held: this.keptTotal });
  }

  /** Shed an idle warm instance when the resident size is past the shed line. */
  check(): void {
    this.shedPast(undefined);
  }

  /** check(), with the shed line when the caller has just computed it (from the same counts). */
  private shedPast(known: number | undefined): void {
    if (this.timer === undefined || this.engine.idleHeapBytes === 0) {
      // Not looked at while nothing could be shed: the next answer reads it afresh.
      this.lastRss = undefined;
      return;
    }
    const rss = this.options.readRss?.() ?? process.memoryUsage.rss();
    this.lastRss = rss;
    const line = known ?? shedLine(this.options.rule, this.budget(), this.base);
    if (rss <= line) return;
    // One instance a look: what evicting one frees is not its counted heap (about that for a large
    // prefix's code, 8 MB more for one keeping an 8 MB typed array: measured), so the next look
    // reads what it freed before evicting another.
    this.shedBytes += this.engine.shedIdle();
  }
}
