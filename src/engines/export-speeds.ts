import type { BlockingBudget } from "./blocking-budget.js";

/** Calls with arguments up to this long wait for their tick's twins (a longer one pays for its own crossing). */
const GATHER_MAX_CHARS = 8192;
/**
 * ...and only to exports whose last crossing took at most this much CPU a call (ms): gathered
 * calls run one after another on one instance, which pays when a crossing costs more than the
 * calls (20-100 µs here), not when each call computes for milliseconds and a second instance
 * could run half of them at once. (A first, cold call of a trivial export: 0.2-0.4 ms.)
 */
const GATHER_MAX_CALL_MS = 1;
/** Exports remembered per prefix (a caller may name any number of paths); past it, forgotten. */
const MAX_REMEMBERED_PATHS = 256;

/**
 * What a warm pool has learned of the exports it calls: which returned a promise, the CPU a call
 * took in each one's last two crossings, and how long the prefix's calls may still block a
 * thread (decision 012). The pool asks it whether a call waits for its tick's twins, whether a
 * crossing may block, and whether an export gets more instances rather than coalesced calls.
 */
export class ExportSpeeds {
  /** Exports whose handler returned a promise: their calls get more instances rather than coalescing. */
  private readonly asyncPaths = new Set<string>();
  /** CPU ms a call in each export's last two crossings (the lower one decides gathering). */
  private readonly cpuPerCall = new Map<string, { last: number; previous: number }>();
  constructor(
    /** How long calls may still block a thread shared with other tenants: the engine's, shared by its prefixes. */
    private readonly blocking: BlockingBudget,
  ) {}

  /** Did `path`'s handler ever return a promise? */
  awaits(path: string): boolean {
    return this.asyncPaths.has(path);
  }

  /** `path`'s handler returned a promise. */
  returnedPromise(path: string): void {
    this.asyncPaths.add(path);
  }

  /**
   * Short calls to handlers that return at once: for them the crossing is most of the cost.
   * Measured, v8, ~774-byte events one per call with 64 in flight, both builds alternating in
   * one process (6 rounds each, two runs): median 79-88k/s -> 122-137k/s. Before, the first
   * call of a burst took the idle instance alone and the rest coalesced behind it, so every
   * other crossing carried one call. Longer arguments (a batch of events) gained nothing.
   */
  gatherable(path: string, argsText: string): boolean {
    return argsText.length <= GATHER_MAX_CHARS && this.isQuick(path);
  }

  /**
   * Gather `path` while one of its last two crossings used at most GATHER_MAX_CALL_MS of CPU a
   * call and it never returned a promise. Two, because a quick export's crossing now and then
   * reads far more (0.4-5.7 ms in a run of 40 trivial calls: a collection, or a served call's
   * share of the serving task's polling). An export not seen yet is not gathered: its first
   * burst goes the way a slow one does (one call to the idle instance, the next to another, the
   * rest coalesced behind them).
   */
  private isQuick(path: string): boolean {
    const cpu = this.cpuPerCall.get(path);
    return cpu !== undefined && !this.asyncPaths.has(path) && Math.min(cpu.last, cpu.previous) <= GATHER_MAX_CALL_MS;
  }

  /** May a crossing of `path` under a CPU limit of `cpuTimeMs` block its thread (the pool checks the rest)? */
  mayBlock(path: string, cpuTimeMs: number): boolean {
    return this.isQuick(path) && this.blocking.allows(cpuTimeMs);
  }

  /**
   * A crossing of `calls` calls to `path` is over: it used `cpuMs` of CPU (undefined: a limit
   * ended it, so it ran for its limit), and, when it blocked its thread, under a CPU limit of
   * `blockedUnder` ms (a crossing a limit ended spends that whole limit).
   */
  crossed(path: string, calls: number, cpuMs: number | undefined, blockedUnder?: number): void {
    this.note(path, cpuMs === undefined ? Number.POSITIVE_INFINITY : cpuMs / calls);
    if (blockedUnder !== undefined) this.blocking.spend(cpuMs === undefined ? blockedUnder : cpuMs - calls * GATHER_MAX_CALL_MS);
  }

  private note(path: string, cpuMs: number): void {
    const cpu = this.cpuPerCall.get(path);
    if (cpu) {
      cpu.previous = cpu.last;
      cpu.last = cpuMs;
      return;
    }
    if (this.cpuPerCall.size >= MAX_REMEMBERED_PATHS) this.cpuPerCall.clear();
    this.cpuPerCall.set(path, { last: cpuMs, previous: Number.POSITIVE_INFINITY });
  }
}
