import { signalAborted, signalReason } from "../core/abort-reason.js";
import { type BridgeAnswer, bridgeErrorText, decodeUnweighed, sharedCodec } from "../core/bindings.js";
import { CordonError, type ErrorCode, LIMIT_CODES, type RunError } from "../core/errors.js";
import { compileBound } from "../core/esbuild-calls.js";
import {
  cleanErrorStacks,
  ERROR_TAG,
  guestThrown,
  redefinableError,
  sanitizeStack,
  withoutRuntimeFrames,
} from "../core/guest-errors.js";
import { AnswerGate } from "../core/answer-gate.js";
import { PENDING_ARGS_FACTOR, type ResolvedLimits } from "../core/limits.js";
import { TEXT_SEPARATOR } from "../core/joined-texts.js";
import { msSince, roundToUs } from "../core/milliseconds.js";
import { isEmptyRecord } from "../core/results.js";
import { remapStack } from "../core/source-map.js";
import type { EngineName, HostName, RunResult } from "../core/types.js";
import { CallLogs } from "./call-logs.js";
import { GuestTimers } from "./guest-timers.js";
import { CANCEL_CALL } from "./guest/runtime.js";
import {
  type EngineInstance,
  type EvaluateRequest,
  FailedAfterReturning,
  type InstanceListener,
  type OutboxReader,
} from "./instance.js";
import { currentProcessCpuUs, type Watched, watchdog } from "./watchdog.js";
import { onAbort } from "../core/abort-listeners.js";

export interface ExecutionOptions {
  engine: Exclude<EngineName, "auto">;
  limits: ResolvedLimits;
  signal?: AbortSignal;
  host: Exclude<HostName, "auto">;
  warm: boolean;
  /** Module names whose stack frames a caller may see. */
  guestFiles: ReadonlySet<string>;
  /** Calls coalesced into this execution (one crossing); each gets its own result. Default 1. */
  size?: number;
}

/**
 * One run or call on an instance: its limits, logs, host calls, timers and outcome.
 *
 * Limits are enforced from the host's event loop, which stays free because the guest runs on
 * another thread (an isolated-vm isolate, or a QuickJS worker): the watchdog checks wall time
 * and the instance's CPU time, the abort signal ends it at once, and the engine's own heap
 * limit does the rest. A fired limit taints and disposes the instance, which stops the guest
 * wherever it is, even inside a synchronous loop.
 */
export class Execution implements InstanceListener, Watched {
  private readonly started = performance.now();
  private cpuStartNs: bigint | undefined;
  /** The watchdog's reading of this process's CPU time when startCpu ran (see cpuMs). */
  private processCpuStartUs = 0;
  /** The engine is compiling the run's source imports (read their bound) and has not started the guest. */
  private compilingImports = false;
  private cpuSeenMs = 0;
  /** Killed: cpuSeenMs is the run's CPU time for good. */
  private cpuFrozen = false;
  private readonly size: number;
  private readonly logs: CallLogs;
  private readonly results: (RunResult | undefined)[] = [];
  private pending: number;
  private bridgeCalls = 0;
  /** While finishAll reads outcomes that arrived together: the stats they share. */
  private sharedStats: RunResult["stats"] | undefined;
  private readonly timers = new GuestTimers((id) => {
    if (this.settled) return;
    this.instance.fire(id).catch((error: unknown) => this.taskFailed(error));
  });
  private settled = false;
  /** Calls whose outcome has arrived (onDone, or a call's reply: onReturned) and is about to be read. */
  private arrived: Set<number> | undefined;
  /**
   * Host calls in flight by call id. Each is aborted when the guest gives up on it (an aborted
   * fetch: its exchange and in-flight slot are freed at once) or when the run settles.
   */
  private readonly hostCalls = new Map<number, AbortController>();
  /** The arguments of the host calls in flight, together (bounded: see PENDING_ARGS_FACTOR). */
  private argCharsInFlight = 0;
  /** The answers on their way to the guest (made at the first host call): core/answer-gate.ts. */
  private answers: AnswerGate | undefined;
  private resolveOutcomes!: (results: RunResult[]) => void;
  /** Every call's result, in order, once all are settled. */
  readonly outcomes = new Promise<RunResult[]>((resolve) => {
    this.resolveOutcomes = resolve;
  });
  /** The result of the first (usually the only) call. */
  get outcome(): Promise<RunResult> {
    return this.outcomes.then((results) => results[0]);
  }
  /** Settled, and its instance not yet free: see checkLingering. */
  private lingering = false;
  /** Stops watching the caller's signal (abort-listeners.ts). */
  private stopWatchingAbort?: () => void;
  /** Made when asked for (a compile of the source imports): most executions never need it. */
  private end: AbortController | undefined;

  /** Aborted once every result is in: work still going on for the execution (a compile) stops. */
  get ended(): AbortSignal {
    if (!this.end) {
      this.end = new AbortController();
      if (this.settled) this.end.abort(ENDED_DURING_COMPILE);
    }
    return this.end.signal;
  }

  constructor(
    private readonly instance: EngineInstance,
    private readonly options: ExecutionOptions,
  ) {
    instance.listener = this;
    this.size = options.size ?? 1;
    this.pending = this.size;
    this.logs = new CallLogs(this.size, options.limits, this.started);
    for (let i = 0; i < this.size; i++) {
      this.results.push(undefined);
    }
    const { signal } = options;
    watchdog.watch(this);
    if (signal) {
      // signalReason: a reason getter that threw here was an uncaught exception from the listener.
      const aborted = () => this.kill("ERR_ABORTED", signalReason(signal));
      if (signalAborted(signal)) queueMicrotask(aborted);
      else this.stopWatchingAbort = onAbort(signal, aborted);
    }
  }

  get isSettled(): boolean {
    return this.settled;
  }

  /** Start counting CPU: from here on, the isolate's CPU time belongs to this execution. */
  startCpu(): void {
    this.compilingImports = false;
    this.cpuStartNs = this.instance.cpuTimeNs();
    this.processCpuStartUs = watchdog.processCpuUs;
  }

  /** Called by the watchdog. CPU counts only from startCpu; wall time from construction. */
  checkLimits(now: number, processCpuUs: number): void {
    if (this.settled) {
      if (this.lingering) this.checkLingering(now, processCpuUs);
      return;
    }
    // The guest is done and its answer waits for this thread, which was busy elsewhere: the
    // isolate's CPU time meanwhile is the serving task polling, not the guest's work (a trivial
    // served call with a 1 ms CPU limit failed 3 times in 400 when this loop stalled 10 ms).
    if (this.instance.answerReady?.()) return;
    const { wallTimeMs, cpuTimeMs } = this.options.limits;
    const over = this.overLimit(now, processCpuUs);
    if (over === "wall" && this.compilingImports) {
      // Named as the module's own compile past its bound is (esbuild-calls.ts): the time went to
      // the imports' text, not to the guest (which had not started).
      const message = `compiling the module's source imports took longer than the run's wall time of ${wallTimeMs} ms: the text costs too much to compile`;
      this.kill("ERR_COMPILE", message, "TimeoutError");
    } else if (over === "wall") this.kill("ERR_WALL_TIMEOUT", `the run exceeded its wall time limit of ${wallTimeMs} ms`);
    else if (over === "cpu") this.kill("ERR_CPU_TIMEOUT", `the run exceeded its CPU time limit of ${cpuTimeMs} ms`);
  }

  /** Which time limit is past at `now`: the wall time counts from construction, CPU from startCpu. */
  private overLimit(now: number, processCpuUs: number): "wall" | "cpu" | undefined {
    const { wallTimeMs, cpuTimeMs } = this.options.limits;
    if (now - this.started >= wallTimeMs) return "wall";
    if (this.cpuStartNs !== undefined && this.cpuMs(processCpuUs) >= cpuTimeMs) return "cpu";
    return undefined;
  }

  /**
   * What the guest left running once its outcomes were out (an unawaited chain, the rest of the
   * task that made a promise's outcome) is still held to this execution's limits until its
   * instance is free again (drained): past them, the instance is discarded. The outcomes already
   * delivered stand. Unwatched, such a tail ran with no limit at all: a call with a 100 ms CPU
   * limit returned in 14 ms and left its isolate spinning for as long as the guest liked (found
   * by review).
   */
  private checkLingering(now: number, processCpuUs: number): void {
    const instance = this.instance;
    if (instance.disposed || instance.tainted || (instance.listener !== undefined && instance.listener !== this)) {
      this.drained();
      return;
    }
    if (this.overLimit(now, processCpuUs) === undefined) return;
    this.drained();
    instance.tainted = true;
    instance.dispose();
  }

  /** The instance is free again (or discarded): what this execution left in it is over. */
  drained(): void {
    if (!this.lingering) return;
    this.lingering = false;
    watchdog.unwatch(this);
  }

  /**
   * CPU used so far, never less than an earlier reading: once a limit has killed the instance (a
   * disposed isolate throws, an exited Deno process reads as 0) the last reading stands, instead
   * of a 0 or a negative figure in the run's stats.
   *
   * While a crossing runs, isolated-vm's reading (and the QuickJS worker's) counts the wall time
   * since it began: on a busy machine, time the OS gave other processes. Where the guest runs
   * in this process (`cpuInProcess`), this process's CPU time bounds it: a guest cannot have
   * used more than the whole process since startCpu, so the smaller of the two is charged (beside
   * spinning processes, a guest with a 300 ms CPU limit was stopped after 103–162 ms of CPU and
   * charged 301–526 ms). `processCpuUs`: the watchdog's reading of this tick; otherwise one
   * is taken, only past 1 ms (a syscall a call would be a measurable share of a trivial one).
   */
  private cpuMs(processCpuUs?: number): number {
    if (this.cpuStartNs === undefined || this.cpuFrozen) return this.cpuSeenMs;
    try {
      let used = Number(this.instance.cpuTimeNs() - this.cpuStartNs) / 1e6;
      if (this.instance.cpuInProcess && (processCpuUs !== undefined || used >= 1)) {
        const processUs = processCpuUs ?? currentProcessCpuUs();
        used = Math.min(used, (processUs - this.processCpuStartUs) / 1000);
      }
      if (used > this.cpuSeenMs) this.cpuSeenMs = used;
    } catch {}
    return this.cpuSeenMs;
  }

  /** Stop the guest wherever it is: the instance is tainted and disposed. */
  kill(code: ErrorCode, message: string, name = "CordonError"): void {
    if (this.settled) return;
    // The reading now is the run's: the guest may run on until the isolate is gone, and a
    // reading then would count that time (wall time, see cpuMs).
    this.cpuMs();
    this.cpuFrozen = true;
    this.instance.tainted = true;
    if (code === "ERR_ABORTED") this.settleAll((index) => this.abortedResult(message, index));
    else this.fail({ code, name, message });
    this.instance.dispose();
  }

  // ---- callbacks from the guest (synchronous) -------------------------------------------------
  onLog(level: string, message: string, index = 0): void {
    if (this.settled || typeof message !== "string") return;
    // What the guest wrote without crossing came first (v8's outbox).
    this.drainOutbox();
    this.logs.add(level, this.remapLog(message), index);
  }

  onTaskEnd(): void {
    if (!this.settled) this.drainOutbox();
  }

  /** Take the log lines and timer changes the instance holds that did not cross (v8's outbox). */
  private drainOutbox(): void {
    this.instance.drainOutbox?.(this.outboxReader);
  }

  private readonly outboxReader: OutboxReader = {
    log: (level, message, index, epochMs) => {
      // The guest's Date.now(): whole milliseconds, so never before the run began nor after now.
      const atMs = roundToUs(Math.min(msSince(this.started), Math.max(0, epochMs - (performance.timeOrigin + this.started))));
      this.logs.add(level, this.remapLog(message), index, atMs);
    },
    timer: (id, ms, epochMs) => {
      // Armed from when the guest set it: the task that set it may have run on for a while.
      this.timers.set(id, ms, epochMs);
    },
  };

  /**
   * A log line as a thrown error's stack would read: without the runtime's frames, and the
   * positions of the guest's files at the lines the caller wrote (a logged error printed
   * `<guest>:25:12` for line 1 of a module, the compiled script form's line).
   */
  private remapLog(message: string): string {
    return this.atCallersLines(withoutRuntimeFrames(message), true);
  }

  /** `text` with the positions of the guest's files through their line maps (remapStack). */
  private atCallersLines(text: string, keepUnmapped = false): string {
    let mapped = text;
    for (const [file, map] of this.instance.lineMaps) {
      if (mapped.includes(`${file}:`)) mapped = remapStack(mapped, file, map, keepUnmapped);
    }
    return mapped;
  }

  /**
   * Start the instance evaluating `request` for this execution: the CPU counted from the engine's
   * start, the source imports compiled within the run's bound (and not past its end), and a
   * failure this execution's.
   */
  evaluate(request: Omit<EvaluateRequest, "caps" | "compile">): void {
    const { limits, signal } = this.options;
    const execution = this;
    this.instance
      .evaluate(
        {
          // Named fields, not `...request`: decision 023.
          bindings: request.bindings,
          mode: request.mode,
          inputText: request.inputText,
          source: request.source,
          sourceImports: request.sourceImports,
          caps: [limits.maxOutputBytes, limits.maxLogEntries, limits.maxLogBytes, limits.maxBridgeCallBytes],
          // Made when read (a source import's compile): `ended` is an AbortController, and making
          // and aborting one cost 10-15 µs of a one-off run here (Node 20's abort dispatches an Event).
          get compile() {
            execution.compilingImports = true;
            return compileBound(limits.wallTimeMs, signal, execution.ended);
          },
        },
        () => this.startCpu(),
      )
      .catch((error: unknown) => this.taskFailed(error));
  }

  onCall(id: number, fnId: number, argsText: string): void {
    if (this.settled) return;
    if (fnId === CANCEL_CALL) {
      this.hostCalls.get(id)?.abort();
      return;
    }
    const limits = this.options.limits;
    this.bridgeCalls++;
    // Limits fire after the callback returns: disposing an isolate from inside its own call is unsafe.
    if (this.bridgeCalls > limits.maxBridgeCalls) {
      setImmediate(() => this.kill("ERR_BRIDGE_CALL_LIMIT", `the run made more than ${limits.maxBridgeCalls} host calls`));
      return;
    }
    if (typeof argsText !== "string" || argsText.length > limits.maxBridgeCallBytes) {
      setImmediate(() =>
        this.kill("ERR_BRIDGE_PAYLOAD_TOO_LARGE", `a host call's arguments exceeded ${limits.maxBridgeCallBytes} bytes`),
      );
      return;
    }
    // The guest runtime refuses such a call itself (catchably): this is the backstop.
    const inFlightLimit = limits.maxBridgeCallBytes * PENDING_ARGS_FACTOR;
    if (this.argCharsInFlight + argsText.length > inFlightLimit) {
      setImmediate(() =>
        this.kill("ERR_BRIDGE_PAYLOAD_TOO_LARGE", `host calls in flight held more than ${inFlightLimit} bytes of arguments`),
      );
      return;
    }
    const bindings = this.instance.bindings;
    if (!bindings) return;
    const controller = new AbortController();
    this.hostCalls.set(id, controller);
    const chars = argsText.length;
    this.argCharsInFlight += chars;
    this.answers ??= new AnswerGate(limits.maxBridgeCallBytes);
    const answers = this.answers;
    void bindings
      .dispatch(fnId, argsText, controller.signal, limits.maxBridgeCallBytes, answers)
      // Dispatching never rejects (bindings.ts); a binding of another kind must not end the host either.
      .catch((): BridgeAnswer => ({ ok: false, text: bridgeErrorText(new Error("the host function failed")) }))
      .then(({ ok, text, tooLarge, held = 0 }) => {
        this.hostCalls.delete(id);
        this.argCharsInFlight -= chars;
        if (this.settled) {
          answers.release(held);
          return;
        }
        if (tooLarge || text.length > limits.maxBridgeCallBytes) {
          answers.release(held);
          this.kill("ERR_BRIDGE_PAYLOAD_TOO_LARGE", `a host call's result exceeded ${limits.maxBridgeCallBytes} bytes`);
          return;
        }
        // Held until the engine has it (the settle crossing is over): then the next may be encoded.
        this.instance
          .settle(id, ok, text)
          .catch((error: unknown) => this.taskFailed(error))
          .finally(() => answers.release(held));
      });
  }

  onTimer(id: number, ms: number): void {
    if (this.settled) return;
    // Changes the guest wrote without crossing came first (v8's outbox).
    this.drainOutbox();
    this.timers.set(id, ms);
  }

  onDone(kind: string, text: string, index = 0): void {
    if (this.settled) return;
    this.arrived ??= new Set();
    this.arrived.add(index);
    // Settle after the callback returns, so a limit firing meanwhile never disposes mid-call.
    setImmediate(() => this.finish(kind, text, index));
  }

  /** See InstanceListener.onReturned. */
  onReturned(joined: string): void {
    if (this.settled) return;
    this.arrived ??= new Set();
    const parts = this.size === 1 ? [joined] : joined.split(TEXT_SEPARATOR);
    for (let i = 0; i < parts.length && i < this.size; i++) if (parts[i] !== "p") this.arrived.add(i);
  }

  /**
   * Read the joined outcomes a call crossing returned ("p": arrives later through onDone).
   * Returns whether any was pending (the export returned a promise).
   */
  finishAll(joined: string): boolean {
    if (this.size === 1) {
      if (joined === "p") return true;
      this.finish(joined[0], joined.slice(1), 0);
      return false;
    }
    const outcomes = joined.split(TEXT_SEPARATOR);
    let pending = false;
    // Outcomes that arrive together share one reading of the clocks (the isolate's CPU time is
    // a call into isolated-vm): one per crossing instead of one per outcome.
    this.sharedStats = this.stats();
    try {
      for (let i = 0; i < outcomes.length && i < this.size; i++) {
        if (outcomes[i] === "p") pending = true;
        else this.finish(outcomes[i][0], outcomes[i].slice(1), i);
      }
    } finally {
      this.sharedStats = undefined;
    }
    return pending;
  }

  // ---- outcomes --------------------------------------------------------------------------------
  /** Read an encoded outcome: kind "o" ok, "v" a call's value, "t" thrown, "f" failed, "m" missing call target. */
  finish(kind: string, text: string, index = 0): void {
    if (this.settled || !(index >= 0 && index < this.size) || this.results[index]) return;
    const codec = sharedCodec();
    const limits = this.options.limits;
    // Every outcome counts against the output limit, a thrown error's too (its message, stack
    // and fields are guest text as much as a value is).
    const what = kind === "t" ? "the error the guest threw" : "the result";
    if (text.length > limits.maxOutputBytes + 64) {
      this.failTooLarge(what, index);
      return;
    }
    // Weighed before any JSON.parse below builds it (codec-containers.ts): every kind, since a
    // guest that reached the runtime's builtins can send any text as any kind. The value and
    // exports share the cap; "o"'s record around them (`{"v":…,"x":{…},"k":[…]}`) is allowed.
    try {
      codec.weigh(text, what, kind === "o" ? 3 : 0);
    } catch (error) {
      const message = error instanceof Error ? error.message : `${what} holds too many objects and arrays`;
      this.fail({ code: "ERR_OUTPUT_TOO_LARGE", name: "CordonError", message }, index);
      return;
    }
    try {
      // Weighed above: the decodes below do not read the text again.
      if (kind === "v") {
        const value = decodeUnweighed(text);
        if (text.includes(ERROR_TAG)) cleanErrorStacks(value, this.cleanStack);
        this.completed(index, value, {}, []);
        return;
      }
      if (kind === "o") {
        const parsed = JSON.parse(text) as { v: unknown; x: Record<string, unknown>; k: string[] };
        const value = codec.revive(parsed.v);
        // A module with no exports but its default: nothing to revive.
        // One crossing with the value, as the guest counted it (codec.encode's `continuing`).
        const exports = isEmptyRecord(parsed.x)
          ? {}
          : (codec.revive({ $: "o", v: parsed.x }, "value", true) as Record<string, unknown>);
        if (text.includes(ERROR_TAG)) cleanErrorStacks([value, exports], this.cleanStack);
        this.completed(index, value, exports, parsed.k.length === 0 ? [] : parsed.k.map(String));
        return;
      }
      if (kind === "f") {
        const { code, message } = JSON.parse(text) as { code: ErrorCode; message: string };
        // The codes the runtime reports itself: past the output limit, a copy the memory cannot
        // hold, a script form the engine does not parse.
        const safe: ErrorCode =
          code === "ERR_OUTPUT_TOO_LARGE" || code === "ERR_MEMORY_LIMIT" || code === "ERR_COMPILE"
            ? code
            : "ERR_NOT_SERIALIZABLE";
        this.fail(
          {
            code: safe,
            name: safe === "ERR_OUTPUT_TOO_LARGE" || safe === "ERR_NOT_SERIALIZABLE" ? "TypeError" : "CordonError",
            message: String(message),
          },
          index,
        );
        return;
      }
      if (kind === "m") {
        const { path, hint } = JSON.parse(text) as { path: string; hint?: unknown };
        // An engine may say how to add the missing entry point (deno: no default export, no Deno.serve).
        const message = `the module has no function at export path "${path}"${typeof hint === "string" ? `: ${hint}` : ""}`;
        this.fail({ code: "ERR_CALL_TARGET_NOT_FOUND", name: "CordonError", message }, index);
        return;
      }
      const thrown = decodeUnweighed(text);
      cleanErrorStacks(thrown, this.cleanStack);
      this.fail(guestThrown(thrown, this.options.guestFiles), index);
    } catch {
      // The text comes from the guest's realm, where the guest can reach the runtime's builtins:
      // what cannot be read is the guest's doing, not a fault of the host.
      const message = "the guest's outcome could not be read (was the runtime's environment tampered with?)";
      this.fail({ code: "ERR_USER_CODE", name: "Error", message }, index);
    }
  }

  private completed(index: number, value: unknown, exports: Record<string, unknown>, skippedExports: string[]): void {
    this.settleOne(index, {
      status: "completed",
      ok: true,
      value,
      exports,
      skippedExports,
      logs: this.logs.of(index),
      stats: this.stats(),
    });
  }

  onFailure(error: unknown): void {
    this.taskFailed(error);
  }

  /** A task inside the isolate threw: an uncaught exception, an unhandled rejection, or a disposal. */
  taskFailed(error: unknown): void {
    if (this.settled) return;
    if (error instanceof FailedAfterReturning) {
      this.finishAll(error.outcomes);
      this.taskFailed(error.failure);
      return;
    }
    if (error instanceof CordonError) {
      this.fail({ code: error.code, name: error.name, message: error.message });
      return;
    }
    // Only the engine's disposal says a memory limit fired: a guest may throw any message it
    // likes ("memory limit" included), and that stays its own error.
    if (this.instance.disposed) {
      this.instance.tainted = true;
      const limitMessage = `the run exceeded its memory limit of ${this.instance.memoryMb} MB`;
      this.fail({ code: "ERR_MEMORY_LIMIT", name: "CordonError", message: limitMessage });
      return;
    }
    // A guest's failure that ended its task: a module's evaluation, a timer, or a promise
    // rejected with nothing to handle it (found as the task ended, after its microtasks ran). It
    // fails the calls that have no outcome yet; an outcome that arrived first stands, whichever
    // way it came (a call's return, onDone, a recovered call in V8Instance), so that the same
    // code always gets the same result.
    const waiting: number[] = [];
    for (let i = 0; i < this.size; i++) if (!this.results[i] && !this.arrived?.has(i)) waiting.push(i);
    if (waiting.length === 0) return;
    // The guest's runtime does not know these calls are over: their timers and promise chains
    // live on, and what they did next (an outcome, a log, a host call) reached the next call on
    // the instance as its own; measured, a later call returned the failed one's value 22 times
    // in 30 on v8, 28 on quickjs. The instance is discarded, as after a fired limit.
    this.instance.tainted = true;
    // What a module's evaluation or a timer threw counts against the output limit too, as an
    // error thrown from a call does (Execution.finish).
    const failure = redefinableError(error);
    cleanErrorStacks(failure, this.cleanStack);
    const thrown = guestThrown(failure, this.options.guestFiles);
    const tooLarge = JSON.stringify(thrown).length > this.options.limits.maxOutputBytes + 64;
    for (const i of waiting) {
      if (tooLarge) this.failTooLarge("the error the guest threw", i);
      else this.fail({ ...thrown }, i);
    }
  }

  /** A guest stack as a caller may see it: the guest's own frames, at the lines the caller wrote. */
  private readonly cleanStack = (stack: string): string => {
    return this.atCallersLines(sanitizeStack(this.instance.guestNames?.(stack) ?? stack, this.options.guestFiles));
  };

  /** An outcome over maxOutputBytes: `what` it was, for the message. */
  private failTooLarge(what: string, index?: number): void {
    const message = `${what} is larger than the limit of ${this.options.limits.maxOutputBytes} bytes`;
    this.fail({ code: "ERR_OUTPUT_TOO_LARGE", name: "CordonError", message }, index);
  }

  /** Fail one call, or (without an index) every call not settled yet. */
  private fail(error: RunError, index?: number): void {
    // A fired limit taints the instance: it is discarded, never reused.
    if (LIMIT_CODES.has(error.code)) this.instance.tainted = true;
    const failed = (at: number): RunResult => ({
      status: "failed",
      ok: false,
      error: { ...error },
      logs: this.logs.of(at),
      stats: this.stats(),
    });
    if (index === undefined) this.settleAll(failed);
    else this.settleOne(index, failed(index));
  }

  private abortedResult(reason: string, index: number): RunResult {
    return {
      status: "aborted",
      ok: false,
      reason,
      error: { code: "ERR_ABORTED", name: "AbortError", message: `the run was aborted: ${reason}` },
      logs: this.logs.of(index),
      stats: this.stats(),
    };
  }

  private settleAll(make: (index: number) => RunResult): void {
    for (let i = 0; i < this.size; i++) if (!this.results[i]) this.settleOne(i, make(i));
  }

  private settleOne(index: number, result: RunResult): void {
    if (this.settled || this.results[index]) return;
    // Into the list `result.logs` is (CallLogs.of): a line logged before the guest stopped stands,
    // a limit's kill included.
    this.drainOutbox();
    if (this.logs.noteCut(index, result.logs)) result.stats.logsTruncated = true;
    this.results[index] = result;
    if (--this.pending > 0) return;
    this.settled = true;
    this.end?.abort(ENDED_DURING_COMPILE);
    // Host calls still in flight end with the run (a brokered fetch's exchange stops).
    for (const call of this.hostCalls.values()) call.abort();
    this.hostCalls.clear();
    // Still watched until the instance is free (checkLingering), unless it is already gone.
    if (this.instance.disposed || this.instance.tainted) watchdog.unwatch(this);
    else this.lingering = true;
    this.timers.clearAll();
    this.stopWatchingAbort?.();
    if (this.instance.listener === this) this.instance.listener = undefined;
    this.resolveOutcomes(this.results as RunResult[]);
  }

  private stats(): RunResult["stats"] {
    if (this.sharedStats) return { ...this.sharedStats };
    return {
      engine: this.options.engine,
      host: this.options.host,
      wallMs: msSince(this.started),
      cpuMs: roundToUs(this.cpuMs()),
      heapUsedBytes: this.options.warm && this.instance.heapUsedBytes ? this.instance.heapUsedBytes : undefined,
      bridgeCalls: this.bridgeCalls,
      warm: this.options.warm,
    };
  }
}

/** Why a compile stops when its execution ended first (its result is already out: nobody reads this). */
const ENDED_DURING_COMPILE = new CordonError("ERR_INSTANCE_RESET", "the run ended while its modules were compiling");
