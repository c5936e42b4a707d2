import type { EngineStats, PrefixCounts } from "./engine.js";
import { isErrorCode } from "./errors.js";
import type { RunResult } from "./types.js";

/**
 * What a RunResult's text may hold beside its value's objects and arrays (codec-containers.ts:
 * the worker or executor weighed the value or the thrown error, exports included, against the
 * codec's cap): its logs (one object each), stats and error. Passed to the host's decode.
 */
export const RESULT_ENVELOPE_CONTAINERS = 1_000_000;

/**
 * Checks for what another process sends as a run's result or an engine's stats (a process
 * worker, a remote executor). A worker a guest has subverted can send anything; a result that
 * reaches a caller must have the shape the types promise (a caller reading `result.error.code`
 * must not throw), and stats feed the memory watchdog's budget, so they must be numbers.
 */
export function isRunResult(value: unknown): value is RunResult {
  if (!isRecord(value) || !isRecord(value.stats) || !Array.isArray(value.logs)) return false;
  const stats = value.stats;
  if (![stats.wallMs, stats.cpuMs, stats.bridgeCalls].every(isCount) || typeof stats.warm !== "boolean") return false;
  if (stats.heapUsedBytes !== undefined && !isCount(stats.heapUsedBytes)) return false;
  for (const entry of value.logs)
    if (!isRecord(entry) || typeof entry.level !== "string" || typeof entry.message !== "string" || !isCount(entry.atMs))
      return false;
  if (value.status === "completed")
    return (
      value.ok === true &&
      isRecord(value.exports) &&
      Array.isArray(value.skippedExports) &&
      value.skippedExports.every((key) => typeof key === "string")
    );
  if (value.status !== "failed" && value.status !== "aborted") return false;
  const error = value.error;
  return (
    value.ok === false &&
    isRecord(error) &&
    isErrorCode(error.code) &&
    typeof error.name === "string" &&
    typeof error.message === "string" &&
    (value.status === "failed" || typeof value.reason === "string")
  );
}

/** An engine's stats as sent by a worker, or undefined when they are not numbers and counts. */
export function readEngineStats(value: unknown, maxPrefixes: number): EngineStats | undefined {
  if (!isRecord(value) || !Array.isArray(value.prefixes) || value.prefixes.length > maxPrefixes) return undefined;
  const totals = [value.warmInstances, value.idleInstances, value.idleHeapBytes, value.budgetBytes, value.spareInstances];
  if (!totals.every(isCount)) return undefined;
  if (!value.prefixes.every(isPrefixCounts)) return undefined;
  // The known fields only: padding a worker adds is not kept.
  return {
    warmInstances: value.warmInstances as number,
    idleInstances: value.idleInstances as number,
    idleHeapBytes: value.idleHeapBytes as number,
    budgetBytes: value.budgetBytes as number,
    spareInstances: value.spareInstances as number,
    prefixes: (value.prefixes as PrefixCounts[]).map(({ key, warm, idle, busy, queued }) => ({ key, warm, idle, busy, queued })),
  };
}

function isPrefixCounts(value: unknown): value is PrefixCounts {
  return (
    isRecord(value) &&
    typeof value.key === "string" &&
    value.key.length <= 64 &&
    [value.warm, value.idle, value.busy, value.queued].every(isCount)
  );
}

/** A finite, non-negative number below 2^53. */
function isCount(value: unknown): value is number {
  return typeof value === "number" && value >= 0 && value <= Number.MAX_SAFE_INTEGER;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}
