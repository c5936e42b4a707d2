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
