import { sharedCodec } from "../../core/bindings.js";
import type { ErrorCode } from "../../core/errors.js";
import type { ResolvedLimits } from "../../core/limits.js";
import { failedResult } from "../../core/results.js";
import { isRunResult, RESULT_ENVELOPE_CONTAINERS } from "../../core/result-shape.js";
import type { HostEvent } from "../../core/protocol.js";
import type { EngineName, RunResult, RunStats } from "../../core/types.js";
import { splitTexts } from "../../core/joined-texts.js";

/**
 * Reading a worker's answers, and the results a lost worker leaves its runs. A worker is a
 * process a guest may have taken over: an answer that is not what it must be is undefined here,
 * and the caller retires the worker.
 */

type RanEngine = Exclude<EngineName, "auto">;

/** A "result" answer: a whole RunResult in the codec's text. */
export function resultOfAnswer(text: string): RunResult | undefined {
  try {
    const result: unknown = sharedCodec().decode(text, "result", RESULT_ENVELOPE_CONTAINERS);
    if (!isRunResult(result)) return undefined;
    result.stats.host = "process";
    return result;
  } catch {
    return undefined;
  }
}

/** A "value" answer (a completed call): the value's codec text and the run's stats as five numbers. */
export function resultOfValue(engine: RanEngine, valueText: string, run: unknown): RunResult | undefined {
  try {
    if (!Array.isArray(run) || run.length !== 5 || !run.every((n) => typeof n === "number")) return undefined;
    const [wallMs, cpuMs, heapUsedBytes, bridgeCalls, warm] = run as number[];
    const stats: RunStats = { engine, host: "process", wallMs, cpuMs, bridgeCalls, warm: warm === 1 };
    if (heapUsedBytes >= 0) stats.heapUsedBytes = heapUsedBytes;
    const value = sharedCodec().decode(valueText);
    return { status: "completed", ok: true, value, exports: {}, skippedExports: [], logs: [], stats };
  } catch {
    return undefined;
  }
}

/**
 * A "values" answer's parts as the "value" answers they stand for; undefined when the frame is
 * malformed (its ids, stats and texts do not line up).
 */
export function valuesOfAnswer(
  ids: unknown,
  runs: unknown,
  valueText: unknown,
): Extract<HostEvent, { t: "value" }>[] | undefined {
  if (!Array.isArray(ids) || !Array.isArray(runs) || typeof valueText !== "string") return undefined;
  if (ids.length < 2 || runs.length !== ids.length * 5) return undefined;
  const texts = splitTexts(valueText, ids.length);
  return texts?.map((text, i) => ({ t: "value", id: ids[i], valueText: text, run: runs.slice(i * 5, i * 5 + 5) }));
}

/** The result of a run its worker could not finish: `cause` says why. */
export function lostResult(engine: RanEngine, code: ErrorCode, cause: string): RunResult {
  const message =
    code === "ERR_MEMORY_LIMIT"
      ? `the worker process passed its memory budget and was killed: ${cause}`
      : code === "ERR_WALL_TIMEOUT"
        ? cause
        : `the worker process running this was lost: ${cause}`;
  return failedResult(engine, "process", { code, name: "CordonError", message });
}

/**
 * The result of a request in a worker that died with `code`. A `neighbour` of the request blamed
 * (for its silence or memory) did nothing wrong: it fails with ERR_INSTANCE_RESET, saying so.
 */
export function deathResult(engine: RanEngine, code: ErrorCode, cause: string, neighbour: boolean): RunResult {
  if (!neighbour) return lostResult(engine, code, cause);
  const why =
    code === "ERR_MEMORY_LIMIT"
      ? "the worker was killed for another run's memory"
      : "another run in this worker stopped answering";
  return lostResult(engine, "ERR_INSTANCE_RESET", `${why}: ${cause}`);
}

/** The worker keeps each prefix's call limits: a call sends them only when they changed. */
export class CallLimitsSent {
  private readonly sent = new Map<number, ResolvedLimits>();

  /** `limits` to send with a call to `prefix`, or undefined when the worker holds them already. */
  toSend(prefix: number, limits: ResolvedLimits): ResolvedLimits | undefined {
    const last = this.sent.get(prefix);
    if (last && sameLimits(last, limits)) return undefined;
    this.sent.set(prefix, limits);
    return limits;
  }

  forget(prefix: number): void {
    this.sent.delete(prefix);
  }
}

function sameLimits(a: ResolvedLimits, b: ResolvedLimits): boolean {
  if (a === b) return true;
  for (const key of Object.keys(a) as (keyof ResolvedLimits)[]) if (a[key] !== b[key]) return false;
  return Object.keys(a).length === Object.keys(b).length;
}
