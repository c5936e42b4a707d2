import { signalAborted, signalReasonValue } from "./abort-reason.js";
import { EsbuildClientLost, EsbuildProcess } from "./esbuild-process.js";
import type { EsbuildAnswers, EsbuildOperation } from "./esbuild-client.js";
import { CordonError } from "./errors.js";
import { whenAborted } from "./when-aborted.js";

/**
 * How long esbuild may work on one module. Its cost is not linear in the text: 800 KB of
 * duplicate declarations kept it busy for minutes (the error check is quadratic), under every size
 * cap. A run's compile gets the run's wall time, at least MIN and at most MAX.
 */
export const COMPILE_TIME_MIN_MS = 1_000;
export const COMPILE_TIME_MAX_MS = 60_000;

/** The time and the signals that bound a compile (a run's, its sandbox's). */
export interface CompileBound {
  timeoutMs: number;
  signals?: (AbortSignal | undefined)[];
  /** Names the module in errors. */
  filename?: string;
  /** When the time is up, if it started earlier than this call (one module's several transforms). */
  deadline?: number;
}

/**
 * The bound for a run with this wall time, ended early by any of `signals`. A signal aborted with
 * a CordonError as its reason (a disposed sandbox's) fails the compile with that error's code.
 */
export function compileBound(wallTimeMs: number, ...signals: (AbortSignal | undefined)[]): CompileBound {
  return { timeoutMs: Math.min(COMPILE_TIME_MAX_MS, Math.max(COMPILE_TIME_MIN_MS, wallTimeMs)), signals };
}

/** For work no run asked for (cordon's own runtime, a module's import list): the longest bound. */
export const DEFAULT_BOUND: CompileBound = { timeoutMs: COMPILE_TIME_MAX_MS };

/**
 * One esbuild service (a copy of esbuild's module in the client, with its own process). `live`
 * counts the calls on it whose callers still wait; a `retired` one takes no new calls.
 */
interface Service {
  client: EsbuildProcess;
  id: number;
  live: number;
  retired: boolean;
  stopped?: boolean;
  /** The only service of a client of its own, ended with it. */
  solo?: boolean;
}

/** The client every service but a retry's runs on, replaced when it ends. */
let shared: EsbuildProcess | undefined;
/** The service new calls go to. */
let current: Service | undefined;

function serviceNow(): Service {
  if (current && (current.retired || current.client.lost)) current = undefined;
  if (!current) {
    if (!shared || shared.lost) shared = new EsbuildProcess();
    current = { client: shared, id: shared.newService(), live: 0, retired: false };
  }
  return current;
}

/**
 * Start the shared service ahead of the first compile (a sandbox does, as it is made): started
 * by the first run, its start (~160 ms) counted in that run's wall time. An empty transform, as
 * its client starts esbuild itself at its first call (started alone, the first compile still
 * took ~60 ms). A failure here is the first run's to meet again.
 */
export function startEsbuild(): void {
  withEsbuild({ kind: "transform", code: "", options: { loader: "js" } }).catch(() => {});
}

/** A service on a client of its own for one call: retired from the start, ended with the call. */
function soloService(): Service {
  const client = new EsbuildProcess();
  return { client, id: client.newService(), live: 0, retired: true, solo: true };
}

/** New calls go to a new service; this one is stopped once no caller waits on it. */
function retire(service: Service): void {
  service.retired = true;
  if (current === service) current = undefined;
  stopIfAbandoned(service);
}

function stopIfAbandoned(service: Service): void {
  // Stopped, a service never answers the calls it held: only abandoned ones may be left on it.
  if (!service.retired || service.live > 0 || service.stopped) return;
  service.stopped = true;
  if (service.solo) service.client.stop();
  else service.client.stopService(service.id);
}

/**
 * Call esbuild, within `bound`. The call runs in esbuild's client process (esbuild-process.ts):
 * whatever esbuild's client does there (throw where no caller can catch, run out of memory
 * decoding an output) ends at most that process; the calls it held fail and later calls get a new
 * client.
 *
 * Past the deadline (or on abort) the caller gets its error at once and the call is abandoned:
 * its service takes no new calls (a new one in the same client does) and is stopped with its
 * process (the only way to end a transform) as soon as the calls it still serves for others have
 * answered. Those lose nothing; they only share the cores with the abandoned work until then
 * (each within its own bound).
 *
 * A failure that is not about the text (the service process was killed, the client ended beside
 * another call's output) retires the service too, and the operation is tried once more on a
 * client of its own. Still failing, it is ERR_INTERNAL; an output too large to read back is
 * ERR_COMPILE.
 */
export async function withEsbuild<K extends EsbuildOperation["kind"]>(
  operation: Extract<EsbuildOperation, { kind: K }>,
  bound: CompileBound = DEFAULT_BOUND,
): Promise<EsbuildAnswers[K]> {
  const deadline = bound.deadline ?? performance.now() + bound.timeoutMs;
  for (let attempt = 0; ; attempt++) {
    const overrun = overrunAt(deadline, bound);
    if (overrun) throw overrun;
    // A retry runs alone on a client of its own: when a client ends while decoding one of several
    // outputs, only the call that ends its own client again is the one whose output is too large.
    const service = attempt === 0 ? serviceNow() : soloService();
    service.live++;
    try {
      return (await within(service.client.call(service.id, operation), deadline, bound)) as EsbuildAnswers[K];
    } catch (error) {
      if (error instanceof CordonError) {
        // Past the deadline, or aborted: abandoned, so its service goes once the others answer
        // (stopped below, when this caller no longer counts, if no other waits).
        retire(service);
        throw error;
      }
      if (firstErrorText(error) !== undefined) throw error;
      retire(service);
      // Alone in the client, this call's output ended it; beside others, it may have been theirs.
      if (error instanceof EsbuildClientLost && error.tooLarge && error.held === 1) {
        throw new CordonError(
          "ERR_COMPILE",
          `${bound.filename ?? "<guest>"}: the compiled module is too large to read back from esbuild ` +
            `(${error.message}): split the module, or nest less deeply`,
        );
      }
      if (attempt > 0) {
        throw new CordonError(
          "ERR_INTERNAL",
          `the module could not be transformed: esbuild failed (${(error as Error)?.message ?? error})`,
        );
      }
    } finally {
      service.live--;
      stopIfAbandoned(service);
    }
  }
}

/** The first error esbuild reports about the text itself; undefined for a failure of esbuild. */
export function firstErrorText(error: unknown): string | undefined {
  const errors = (error as { errors?: { text?: string }[] })?.errors;
  return Array.isArray(errors) ? errors[0]?.text : undefined;
}

/** `work`'s outcome, or the overrun error when the deadline passes or a signal aborts first. */
function within<T>(work: Promise<T>, deadline: number, bound: CompileBound): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let stopWatching = () => {};
    const end = (settle: () => void) => {
      clearTimeout(timer);
      stopWatching();
      settle();
    };
    const timer = setTimeout(() => end(() => reject(overrunAt(0, bound))), Math.max(0, deadline - performance.now()));
    stopWatching = whenAborted(bound.signals ?? [], () => end(() => reject(overrunAt(Number.POSITIVE_INFINITY, bound))));
    work.then(
      (value) => end(() => resolve(value)),
      (error) => end(() => reject(error)),
    );
  });
}

/** The errors that ended a compile early: named for a run's result by `compileFailureName`. */
const overruns = new WeakSet<CordonError>();

/** The error for a compile that is aborted, or past `deadline` now; undefined while it may go on. */
function overrunAt(deadline: number, bound: CompileBound): CordonError | undefined {
  const name = bound.filename ?? "<guest>";
  let error: CordonError;
  // The native getters: a caller's signal may shadow them with a getter that throws (from an abort listener).
  const aborted = bound.signals?.find((signal) => signalAborted(signal));
  if (aborted) {
    const reason: unknown = signalReasonValue(aborted);
    error =
      reason instanceof CordonError
        ? new CordonError(reason.code, `${name}: ${reason.message}`)
        : new CordonError("ERR_ABORTED", `${name}: the run was aborted while the module was compiling`, { cause: reason });
  } else if (performance.now() < deadline) {
    return undefined;
  } else {
    error = new CordonError(
      "ERR_COMPILE",
      bound.signals === undefined
        ? `${name}: compiling the module took longer than ${bound.timeoutMs} ms: the text costs too much to compile`
        : `${name}: compiling the module took longer than ${bound.timeoutMs} ms (the run's wall time, at least ` +
            `${COMPILE_TIME_MIN_MS} and at most ${COMPILE_TIME_MAX_MS} ms): the text costs too much to compile`,
    );
  }
  overruns.add(error);
  return error;
}

/** The `name` a run's result gives a compile failure: SyntaxError for the text's own errors. */
export function compileFailureName(error: CordonError): string {
  if (!overruns.has(error)) return "SyntaxError";
  if (error.code === "ERR_ABORTED") return "AbortError";
  return error.code === "ERR_COMPILE" ? "TimeoutError" : "CordonError";
}
