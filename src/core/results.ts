import type { RunError } from "./errors.js";
import { roundToUs } from "./milliseconds.js";
import type { AbortedResult, CompletedResult, FailedResult, RunStats } from "./types.js";

/** Stats of a run that ended before any guest code ran: nothing used, nothing warm. */
function emptyStats(engine: RunStats["engine"], host: RunStats["host"], wallMs: number): RunStats {
  return { engine, host, wallMs: roundToUs(wallMs), cpuMs: 0, bridgeCalls: 0, warm: false };
}

/** A failure decided outside the guest (queue, instance, worker, input): no logs, empty stats. */
export function failedResult(engine: RunStats["engine"], host: RunStats["host"], error: RunError, wallMs = 0): FailedResult {
  return { status: "failed", ok: false, error, logs: [], stats: emptyStats(engine, host, wallMs) };
}

/** An abort that arrived before any guest code ran. */
export function abortedResult(engine: RunStats["engine"], host: RunStats["host"], reason: string, wallMs = 0): AbortedResult {
  return {
    status: "aborted",
    ok: false,
    reason,
    error: { code: "ERR_ABORTED", name: "AbortError", message: `the run was aborted: ${reason}` },
    logs: [],
    stats: emptyStats(engine, host, wallMs),
  };
}

/** A prefix that is already held (warm): what `ensure` answers without asking anyone. */
export function heldPrefixResult(engine: RunStats["engine"], host: RunStats["host"]): CompletedResult {
  return {
    status: "completed",
    ok: true,
    value: undefined,
    exports: {},
    skippedExports: [],
    logs: [],
    stats: { engine, host, wallMs: 0, cpuMs: 0, bridgeCalls: 0, warm: true },
  };
}

/** No enumerable key at all: a result's exports with nothing in them (no array of keys is made). */
export function isEmptyRecord(record: object): boolean {
  for (const _ in record) return false;
  return true;
}

/**
 * The error of a request too large for the channel to its engine (`where`: a worker's pipe, an
 * executor's body cap). A call's arguments, or a run's input when that is most of it, cannot
 * cross: ERR_NOT_SERIALIZABLE. Otherwise it is the module (its compiled forms and line maps):
 * ERR_COMPILE, as for a module over the code limit.
 */
export function oversizedRequest(
  request: { t: string; inputText?: string; source?: { code: string; script?: { code: string } } },
  where: string,
  why: string,
): RunError {
  const input = request.inputText?.length ?? 0;
  // A process worker gets a module's script form alone when it has one (hosts/process/host.ts).
  const code = Math.max(request.source?.code.length ?? 0, request.source?.script?.code.length ?? 0);
  const call = request.t === "prefix-call";
  const what = call
    ? "the call's arguments are"
    : input > code
      ? "the run's input is"
      : "the module (its code and line maps, as compiled) is";
  return {
    code: call || input > code ? "ERR_NOT_SERIALIZABLE" : "ERR_COMPILE",
    name: "CordonError",
    message: `${what} too large for ${where}: ${why}`,
  };
}
