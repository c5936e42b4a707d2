import type { GuestSource } from "../../core/source.js";

/**
 * One worker's memory budget, the line the host's RSS watchdog kills it for crossing (pool.ts),
 * computed the same way on both sides of the pipe: the worker sheds idle warm instances before
 * its resident size comes near it (worker-main.ts), so its warm state alone never gets it killed.
 */
export interface RssRule {
  /** For the worker's own heap and uncollected garbage (workers.rssSlackMb). */
  slackBytes: number;
  /** A hard cap instead of the computed budget (workers.maxRssMb). */
  maxBytes?: number;
}

/** What the budget is made of, in bytes. */
export interface RssParts {
  /** Resident size once the worker's spare instances existed (its calibrated base). */
  base: number;
  /** The memory limits of the requests in flight. */
  inFlight: number;
  /** Heap of the idle warm instances, counted only up to what the host knows may live there. */
  warmHeap: number;
  /** What the worker keeps of each prefix it holds (its source, twice: see heldBytesOf). */
  held: number;
}

export function rssBudget(rule: RssRule, parts: RssParts): number {
  if (rule.maxBytes !== undefined) return rule.maxBytes;
  return parts.base + parts.inFlight + parts.warmHeap + parts.held + rule.slackBytes;
}

/**
 * Where a worker starts shedding idle warm instances: this far under its budget. Residency counts
 * an instance's heap; what it holds outside it (a typed array's bytes) is resident all the same,
 * and counted by heap alone idle instances overran the slack and the watchdog killed the worker
 * with other tenants' runs in it. A quarter of the slack (of the room over the base, under a hard
 * cap) is left for what a run allocates before the next look (every SHED_CHECK_MS).
 */
export function shedLine(rule: RssRule, budget: number, base: number): number {
  const room = rule.maxBytes !== undefined ? Math.max(0, rule.maxBytes - base) : rule.slackBytes;
  return budget - room / 4;
}

/** How often a worker with idle warm instances compares its resident size with its shed line. */
export const SHED_CHECK_MS = 20;

/**
 * What a worker keeps of a prefix besides its instances: the module's text (and its imports' and
 * bindings' descriptions) as parsed from the frame, two bytes a character (V8 keeps text with any
 * character past Latin-1 as two-byte). Measured: 0.85-1.2 MB resident a 512 KiB prefix with no
 * instance kept.
 */
export function heldBytesOf(prepare: {
  source: GuestSource;
  sourceImports: Record<string, string>;
  bindingsText: string;
}): number {
  let chars = prepare.source.code.length + (prepare.source.script?.code.length ?? 0) + prepare.bindingsText.length;
  for (const text of Object.values(prepare.sourceImports)) chars += text.length;
  return chars * 2;
}

/**
 * How long a one-off run's memory stays in its worker's budget after the run is answered, on both
 * sides of the pipe. Its instance is disposed only after the answer is written (CLEANUP_DELAY_MS
 * later, worker-main.ts, then 0.5–2 ms to dispose; later on a loaded machine): until then its
 * heap is resident, and a watchdog look (every 25 ms while runs are in flight) that compared it with a budget no longer
 * holding the run could kill the worker, and every run in it, for memory nobody uses any more.
 */
export const ONE_OFF_RELEASE_MS = 50;

/**
 * Memory of one-off runs just answered: the largest of those answered in the last
 * ONE_OFF_RELEASE_MS, not their sum. Summed, a stream of one-offs raised the budget by every
 * recent run's limit (100 runs a second of 128 MB: +640 MB for 50 ms each) while their trivial
 * instances held a few MB, room a guest's off-heap bomb in the same worker could use. Several
 * heavy one-offs ending within 50 ms of each other are counted as one, as before this existed.
 */
export class ReleasingMemory {
  /** Oldest first: every entry waits the same time. */
  private readonly entries: { bytes: number; until: number }[] = [];

  add(bytes: number, now = performance.now()): void {
    if (bytes > 0) this.entries.push({ bytes, until: now + ONE_OFF_RELEASE_MS });
  }

  /** What still counts at `now`: the largest entry not past its time (those past it are dropped). */
  bytes(now = performance.now()): number {
    while (this.entries.length > 0 && this.entries[0].until <= now) this.entries.shift();
    let largest = 0;
    for (const entry of this.entries) if (entry.bytes > largest) largest = entry.bytes;
    return largest;
  }
}
