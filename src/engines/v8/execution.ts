import { dispatchBridgeCall, sharedCodec } from "../../core/bindings.js";
import { CordonError, type ErrorCode, LIMIT_CODES, type RunError } from "../../core/errors.js";
import { guestThrown, sanitizeStack } from "../../core/guest-errors.js";
import { MAX_PENDING_TIMERS, type ResolvedLimits } from "../../core/limits.js";
import { remapStack } from "../../core/source-map.js";
import type { HostName, LogEntry, LogLevel, RunResult } from "../../core/types.js";
import type { InstanceListener, V8Instance } from "./instance.js";

const LOG_LEVELS = new Set<LogLevel>(["log", "info", "warn", "error", "debug"]);

export interface ExecutionOptions {
  limits: ResolvedLimits;
  signal?: AbortSignal;
  host: Exclude<HostName, "auto">;
  warm: boolean;
  /** Module names whose stack frames a caller may see. */
  guestFiles: ReadonlySet<string>;
}

/**
 * One run or call on an instance: its limits, logs, host calls, timers and outcome.
 *
 * Limits are enforced from the host's event loop, which stays free because every isolated-vm
 * call is asynchronous: a wall timer, a CPU timer reading `isolate.cpuTime`, the abort signal,
 * and isolated-vm's heap limit. A fired limit taints and disposes the instance, which stops the
 * guest wherever it is, even inside a synchronous loop.
 */
export class Execution implements InstanceListener {
  private readonly started = performance.now();
  private cpuStartNs: bigint | undefined;
  private readonly logs: LogEntry[] = [];
  private logBytes = 0;
  private logsTruncated = false;
  private bridgeCalls = 0;
  private readonly timers = new Map<number, NodeJS.Timeout>();
  private readonly limitTimers: NodeJS.Timeout[] = [];
  private settled = false;
  private resolveOutcome!: (result: RunResult) => void;
  readonly outcome = new Promise<RunResult>((resolve) => {
    this.resolveOutcome = resolve;
  });
  private readonly onAbort?: () => void;

  constructor(
    private readonly instance: V8Instance,
    private readonly options: ExecutionOptions,
  ) {
    instance.listener = this;
    const { limits, signal } = options;
    this.limitTimers.push(
      setTimeout(
        () => this.kill("ERR_WALL_TIMEOUT", `the run exceeded its wall time limit of ${limits.wallTimeMs} ms`),
        limits.wallTimeMs,
      ),
    );
    if (signal) {
      this.onAbort = () => this.kill("ERR_ABORTED", abortReason(signal.reason));
      if (signal.aborted) queueMicrotask(this.onAbort);
      else signal.addEventListener("abort", this.onAbort, { once: true });
    }
  }

  get isSettled(): boolean {
    return this.settled;
  }

  /** Start counting CPU: from here on, the isolate's CPU time belongs to this execution. */
  startCpu(): void {
    this.cpuStartNs = this.instance.isolate.cpuTime;
    const limitMs = this.options.limits.cpuTimeMs;
    // CPU can only grow as fast as the wall clock: check when the budget could first be spent.
    const check = () => {
      if (this.settled) return;
      const usedMs = this.cpuMs();
      if (usedMs >= limitMs) this.kill("ERR_CPU_TIMEOUT", `the run exceeded its CPU time limit of ${limitMs} ms`);
      else this.limitTimers.push(setTimeout(check, Math.max(1, Math.ceil(limitMs - usedMs))));
    };
    this.limitTimers.push(setTimeout(check, limitMs));
  }

  private cpuMs(): number {
    if (this.cpuStartNs === undefined) return 0;
    try {
      return Number(this.instance.isolate.cpuTime - this.cpuStartNs) / 1e6;
    } catch {
      return 0;
    }
  }

  /** Stop the guest wherever it is: the instance is tainted and disposed. */
  kill(code: ErrorCode, message: string): void {
    if (this.settled) return;
    this.instance.tainted = true;
    if (code === "ERR_ABORTED") this.settle(this.abortedResult(message));
    else this.fail({ code, name: "CordonError", message });
    this.instance.dispose();
  }

  // ---- callbacks from the guest (synchronous) -------------------------------------------------
  onLog(level: string, message: string): void {
    if (this.settled || typeof message !== "string") return;
    const limits = this.options.limits;
    if (this.logs.length >= limits.maxLogEntries || this.logBytes + message.length > limits.maxLogBytes) {
      this.logsTruncated = true;
      return;
    }
    this.logBytes += message.length;
    const safeLevel = LOG_LEVELS.has(level as LogLevel) ? (level as LogLevel) : "log";
    this.logs.push({ level: safeLevel, message, atMs: round(performance.now() - this.started) });
  }

  onCall(id: number, fnId: number, argsText: string): void {
    if (this.settled) return;
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
    const bindings = this.instance.bindings;
    if (!bindings) return;
    void dispatchBridgeCall(bindings, fnId, argsText).then(({ ok, text }) => {
      if (this.settled) return;
      if (text.length > limits.maxBridgeCallBytes) {
        this.kill("ERR_BRIDGE_PAYLOAD_TOO_LARGE", `a host call's result exceeded ${limits.maxBridgeCallBytes} bytes`);
        return;
      }
      this.instance.settle(id, ok, text).catch((error: unknown) => this.taskFailed(error));
    });
  }

  onTimer(id: number, ms: number): void {
    if (this.settled) return;
    const existing = this.timers.get(id);
    if (existing) clearTimeout(existing);
    this.timers.delete(id);
    if (ms < 0 || this.timers.size >= MAX_PENDING_TIMERS) return;
    const handle = setTimeout(() => {
      this.timers.delete(id);
      if (this.settled) return;
      this.instance.fire(id).catch((error: unknown) => this.taskFailed(error));
    }, ms);
    this.timers.set(id, handle);
  }

  onDone(kind: string, text: string): void {
    if (this.settled) return;
    // Settle after the callback returns, so a limit firing meanwhile never disposes mid-call.
    setImmediate(() => this.finish(kind, text));
  }

  // ---- outcomes --------------------------------------------------------------------------------
  /** Read an encoded outcome: kind "o" ok, "t" thrown, "f" failed, "m" missing call target. */
  finish(kind: string, text: string): void {
    if (this.settled) return;
    const codec = sharedCodec();
    const limits = this.options.limits;
    try {
      if (kind === "o") {
        if (text.length > limits.maxOutputBytes + 64) {
          const message = `the result is larger than the limit of ${limits.maxOutputBytes} bytes`;
          this.fail({ code: "ERR_OUTPUT_TOO_LARGE", name: "CordonError", message });
          return;
        }
        const parsed = JSON.parse(text) as { v: unknown; x: Record<string, unknown>; k: string[] };
        this.settle({
          status: "completed",
          ok: true,
          value: codec.revive(parsed.v),
          exports: codec.revive({ $: "o", v: parsed.x }) as Record<string, unknown>,
          skippedExports: parsed.k.map(String),
          logs: this.logs,
          stats: this.stats(),
        });
        return;
      }
      if (kind === "f") {
        const { code, message } = JSON.parse(text) as { code: ErrorCode; message: string };
        const safe: ErrorCode = code === "ERR_OUTPUT_TOO_LARGE" ? "ERR_OUTPUT_TOO_LARGE" : "ERR_NOT_SERIALIZABLE";
        this.fail({ code: safe, name: "TypeError", message: String(message) });
        return;
      }
      if (kind === "m") {
        const { path } = JSON.parse(text) as { path: string };
        const message = `the prefix has no function at export path "${path}"`;
        this.fail({ code: "ERR_CALL_TARGET_NOT_FOUND", name: "CordonError", message });
        return;
      }
      this.fail(guestThrown(codec.decode(text), this.options.guestFiles));
    } catch {
      this.fail({ code: "ERR_INTERNAL", name: "CordonError", message: "the guest's result could not be read" });
    }
  }

  /** A task inside the isolate threw: an uncaught exception, an unhandled rejection, or a disposal. */
  taskFailed(error: unknown): void {
    if (this.settled) return;
    if (error instanceof CordonError) {
      this.fail({ code: error.code, name: error.name, message: error.message });
      return;
    }
    const message = (error as Error)?.message ?? "";
    if (this.instance.disposed || /memory limit/.test(message)) {
      this.instance.tainted = true;
      const limitMessage = `the run exceeded its memory limit of ${this.instance.memoryMb} MB`;
      this.fail({ code: "ERR_MEMORY_LIMIT", name: "CordonError", message: limitMessage });
      return;
    }
    this.fail(guestThrown(error, this.options.guestFiles));
  }

  private fail(error: RunError): void {
    // A fired limit taints the instance: it is discarded, never reused.
    if (LIMIT_CODES.has(error.code)) this.instance.tainted = true;
    if (error.stack) {
      let stack = sanitizeStack(error.stack, this.options.guestFiles);
      for (const [file, map] of this.instance.lineMaps) stack = remapStack(stack, file, map);
      error.stack = stack;
    }
    this.settle({ status: "failed", ok: false, error, logs: this.logs, stats: this.stats() });
  }

  private abortedResult(reason: string): RunResult {
    return {
      status: "aborted",
      ok: false,
      reason,
      error: { code: "ERR_ABORTED", name: "AbortError", message: `the run was aborted: ${reason}` },
      logs: this.logs,
      stats: this.stats(),
    };
  }

  private settle(result: RunResult): void {
    if (this.settled) return;
    this.settled = true;
    for (const timer of this.limitTimers) clearTimeout(timer);
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    if (this.onAbort) this.options.signal?.removeEventListener("abort", this.onAbort);
    if (this.instance.listener === this) this.instance.listener = undefined;
    if (this.logsTruncated) {
      const { maxLogEntries, maxLogBytes } = this.options.limits;
      result.stats.logsTruncated = true;
      result.logs.push({
        level: "warn",
        message: `[cordon] logs truncated: the run logged more than ${maxLogEntries} entries or ${maxLogBytes} bytes`,
        atMs: round(performance.now() - this.started),
      });
    }
    this.resolveOutcome(result);
  }

  private stats(): RunResult["stats"] {
    return {
      engine: "v8",
      host: this.options.host,
      wallMs: round(performance.now() - this.started),
      cpuMs: round(this.cpuMs()),
      heapUsedBytes: this.options.warm && this.instance.heapUsedBytes ? this.instance.heapUsedBytes : undefined,
      bridgeCalls: this.bridgeCalls,
      warm: this.options.warm,
    };
  }
}

export function abortReason(reason: unknown): string {
  if (reason instanceof Error) return reason.message || reason.name;
  if (typeof reason === "string") return reason;
  return "aborted by the caller";
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
