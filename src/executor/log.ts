import { type DestinationStream, type Logger, pino } from "pino";
import { roundToUs } from "../core/milliseconds.js";
import type { RunResult } from "../core/types.js";

/**
 * The service's log: JSON lines on stderr (stdout belongs to the command's own output). What may
 * appear: outcomes, codes, timings, addresses. What never does: the admission secret, the
 * authorization header, a request's code, input or filename, a result's value or guest logs.
 */
export function createServiceLogger(destination: DestinationStream = pino.destination({ dest: 2, sync: true })): Logger {
  return pino({ base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime }, destination);
}

/** One line per run: the outcome and its stats, nothing the guest produced. */
export function logRun(logger: Logger, result: RunResult, elapsedMs: number): void {
  const { stats } = result;
  logger.info(
    {
      event: "run",
      status: result.status,
      code: result.ok ? undefined : result.error.code,
      engine: stats.engine,
      host: stats.host,
      wallMs: stats.wallMs,
      cpuMs: stats.cpuMs,
      warm: stats.warm,
      elapsedMs: roundToUs(elapsedMs),
    },
    "run",
  );
}

/** One line per refused request: status and code only (a message may quote the request). */
export function logRefusal(logger: Logger, status: number, code: string, method: string, path: string): void {
  logger.warn({ event: "refused", status, code, method, path: path.slice(0, 200) }, "refused");
}
