import type * as IVM from "isolated-vm";
import { dispatchBridgeCall, sharedCodec } from "../../core/bindings.js";
import type { EngineRunRequest } from "../../core/engine.js";
import { CordonError, type ErrorCode, type RunError } from "../../core/errors.js";
import { guestThrown, sanitizeStack } from "../../core/guest-errors.js";
import { MAX_PENDING_TIMERS } from "../../core/limits.js";
import { normalizeSource } from "../../core/source.js";
import { type LineMap, remapStack } from "../../core/source-map.js";
import type { LogEntry, LogLevel, RunResult } from "../../core/types.js";
import { guestRuntimeScript, HOST_CALLBACK_NAMES, RUNTIME_FILENAME } from "../guest/bundle.js";
import { parseUrl, randomBytes, setUrlPart } from "../host-services.js";
import { loadIsolatedVm } from "./load.js";

const LOG_LEVELS = new Set<LogLevel>(["log", "info", "warn", "error", "debug"]);
// The driver imports the guest under this name. A guest importing it only imports itself.
const ENTRY_SPECIFIER = "cordon:entry";

/**
 * One guest run in a fresh isolate: bootstrap, module graph, limits, bridge, result.
 *
 * Limits are enforced from the host's event loop, which stays free because every isolated-vm
 * call used here is asynchronous: a wall timer, a CPU timer that reads `isolate.cpuTime`, the
 * abort signal, and isolated-vm's heap limit. A fired limit disposes the isolate, which stops
 * the guest wherever it is, even inside a synchronous loop.
 */
export class V8Run {
  private readonly ivm = loadIsolatedVm();
  private isolate!: IVM.Isolate;
  private context!: IVM.Context;
  private readonly started = performance.now();
  private cpuStartNs = 0n;
  private readonly logs: LogEntry[] = [];
  private logBytes = 0;
  private logsTruncated = false;
  private bridgeCalls = 0;
  private readonly timers = new Map<number, NodeJS.Timeout>();
  private limitTimers: NodeJS.Timeout[] = [];
  private settled = false;
  private resolveOutcome!: (result: RunResult) => void;
  private readonly outcome = new Promise<RunResult>((resolve) => {
    this.resolveOutcome = resolve;
  });
  private settleRef?: IVM.Reference<(id: number, ok: boolean, text: string) => void>;
  private fireRef?: IVM.Reference<(id: number) => void>;
  private readonly guestFiles: Set<string>;
  /** Source maps of the guest's modules, to report the caller's own line numbers. */
  private readonly lineMaps = new Map<string, LineMap>();
  private onAbort?: () => void;

  constructor(private readonly request: EngineRunRequest) {
    this.guestFiles = new Set([request.source.filename, ...Object.keys(request.sourceImports)]);
    this.lineMaps.set(request.source.filename, request.source.lineMap);
  }

  async execute(): Promise<RunResult> {
    const { signal, limits } = this.request;
    if (signal?.aborted) return this.aborted(abortReason(signal.reason));
    this.isolate = new this.ivm.Isolate({ memoryLimit: limits.memoryMb });
    try {
      this.armLimits();
      await this.bootstrap();
      const driver = await this.link();
      if (driver && !this.settled) {
        this.cpuStartNs = this.isolate.cpuTime;
        this.armCpuLimit();
        driver.evaluate().catch((error: unknown) => this.taskFailed(error));
      }
    } catch (error) {
      this.setupFailed(error);
    }
    const result = await this.outcome;
    this.cleanup();
    return result;
  }

  // ---- set-up ------------------------------------------------------------------------------------
  private async bootstrap(): Promise<void> {
    const ivm = this.ivm;
    this.context = await this.isolate.createContext();
    const global = this.context.global;
    const n = HOST_CALLBACK_NAMES;
    const callbacks: [string, (...args: never[]) => unknown][] = [
      [n.log, (level: string, message: string) => this.onLog(level, message)],
      [n.call, (id: number, fnId: number, argsText: string) => this.onCall(id, fnId, argsText)],
      [n.timer, (id: number, ms: number) => this.onTimer(id, ms)],
      [n.done, (kind: string, text: string) => this.onDone(kind, text)],
      [n.parseUrl, parseUrl],
      [n.setUrlPart, setUrlPart],
      [n.randomBytes, randomBytes],
    ];
    for (const [name, fn] of callbacks) global.setSync(name, new ivm.Callback(fn));
    const script = await this.isolate.compileScript(guestRuntimeScript(), { filename: RUNTIME_FILENAME });
    const internals = (await script.run(this.context, { reference: true })) as IVM.Reference<Record<string, unknown>>;
    const get = (name: string) => internals.getSync(name, { reference: true }) as IVM.Reference<(...a: unknown[]) => unknown>;
    this.settleRef = get("settle");
    this.fireRef = get("fire");
    const { limits, inputText, bindings } = this.request;
    await get("begin").apply(undefined, [inputText, limits.maxOutputBytes, limits.maxLogEntries, limits.maxLogBytes]);
    await get("install").apply(undefined, [bindings.text]);
  }

  /** Compile the guest module and everything it imports; returns the driver module to evaluate. */
  private async link(): Promise<IVM.Module | undefined> {
    const { source, sourceImports } = this.request;
    const compile = async (code: string, filename: string) => {
      try {
        return await this.isolate.compileModule(code, { filename });
      } catch (error) {
        throw this.isolate.isDisposed ? error : new CordonError("ERR_COMPILE", describeCompileError(error, filename));
      }
    };
    const entry = await compile(source.code, source.filename);
    const driver = await compile(
      `import * as ns from ${JSON.stringify(ENTRY_SPECIFIER)};\n__cordon_entry(ns);`,
      RUNTIME_FILENAME,
    );
    const hostModules = JSON.parse(this.request.bindings.text).modules as Record<string, { o?: Record<string, unknown> }>;
    const resolved = new Map<string, Promise<IVM.Module>>();
    const resolve = (specifier: string): Promise<IVM.Module> => {
      if (specifier === ENTRY_SPECIFIER) return Promise.resolve(entry);
      let module = resolved.get(specifier);
      if (!module) {
        module = this.resolveImport(specifier, sourceImports, hostModules, compile);
        resolved.set(specifier, module);
      }
      return module;
    };
    await driver.instantiate(this.context, (specifier) => resolve(specifier));
    return driver;
  }

  private async resolveImport(
    specifier: string,
    sourceImports: Record<string, string>,
    hostModules: Record<string, { o?: Record<string, unknown> }>,
    compile: (code: string, filename: string) => Promise<IVM.Module>,
  ): Promise<IVM.Module> {
    if (Object.hasOwn(sourceImports, specifier)) {
      const normalized = await normalizeSource(sourceImports[specifier], specifier);
      this.lineMaps.set(specifier, normalized.lineMap);
      return compile(normalized.code, specifier);
    }
    if (Object.hasOwn(hostModules, specifier)) {
      const names = Object.keys(hostModules[specifier].o ?? {}).filter((k) => /^[A-Za-z_$][\w$]*$/.test(k) && k !== "default");
      const destructure = names.length ? `export const { ${names.join(", ")} } = m;` : "";
      return compile(`const m = __cordon_module(${JSON.stringify(specifier)});\nexport default m;\n${destructure}`, specifier);
    }
    throw new CordonError(
      "ERR_MODULE_NOT_FOUND",
      `Cannot find module ${JSON.stringify(specifier)}: a guest can import only the modules passed in \`imports\` (no node: builtins, files or packages)`,
    );
  }

  // ---- limits ------------------------------------------------------------------------------------
  private armLimits(): void {
    const { limits, signal } = this.request;
    this.limitTimers.push(
      setTimeout(
        () => this.kill("ERR_WALL_TIMEOUT", `the run exceeded its wall time limit of ${limits.wallTimeMs} ms`),
        limits.wallTimeMs,
      ),
    );
    if (signal) {
      this.onAbort = () => this.kill("ERR_ABORTED", abortReason(signal.reason));
      signal.addEventListener("abort", this.onAbort, { once: true });
    }
  }

  /** CPU can only grow as fast as the wall clock, so checking when the budget could first be spent is exact. */
  private armCpuLimit(): void {
    const limitMs = this.request.limits.cpuTimeMs;
    const check = () => {
      if (this.settled) return;
      const usedMs = this.cpuMs();
      if (usedMs >= limitMs) {
        this.kill("ERR_CPU_TIMEOUT", `the run exceeded its CPU time limit of ${limitMs} ms`);
        return;
      }
      this.limitTimers.push(setTimeout(check, Math.max(1, Math.ceil(limitMs - usedMs))));
    };
    this.limitTimers.push(setTimeout(check, limitMs));
  }

  private cpuMs(): number {
    try {
      return Number(this.isolate.cpuTime - this.cpuStartNs) / 1e6;
    } catch {
      return 0;
    }
  }

  /** Stop the guest wherever it is. The isolate is disposed: a limit taints it for good. */
  private kill(code: ErrorCode, message: string): void {
    if (this.settled) return;
    if (code === "ERR_ABORTED") this.settle(this.aborted(message));
    else this.fail({ code, name: "CordonError", message });
  }

  // ---- host callbacks (called synchronously from the guest) ---------------------------------------
  private onLog(level: string, message: string): void {
    if (this.settled || typeof message !== "string") return;
    const limits = this.request.limits;
    if (this.logs.length >= limits.maxLogEntries || this.logBytes + message.length > limits.maxLogBytes) {
      this.logsTruncated = true;
      return;
    }
    this.logBytes += message.length;
    const safeLevel = LOG_LEVELS.has(level as LogLevel) ? (level as LogLevel) : "log";
    this.logs.push({ level: safeLevel, message, atMs: round(performance.now() - this.started) });
  }

  private onCall(id: number, fnId: number, argsText: string): void {
    if (this.settled) return;
    const limits = this.request.limits;
    this.bridgeCalls++;
    if (this.bridgeCalls > limits.maxBridgeCalls) {
      this.later(() => this.kill("ERR_BRIDGE_CALL_LIMIT", `the run made more than ${limits.maxBridgeCalls} host calls`));
      return;
    }
    if (typeof argsText !== "string" || argsText.length > limits.maxBridgeCallBytes) {
      this.later(() =>
        this.kill("ERR_BRIDGE_PAYLOAD_TOO_LARGE", `a host call's arguments exceeded ${limits.maxBridgeCallBytes} bytes`),
      );
      return;
    }
    void dispatchBridgeCall(this.request.bindings, fnId, argsText).then(({ ok, text }) => {
      if (this.settled) return;
      if (text.length > limits.maxBridgeCallBytes) {
        this.kill("ERR_BRIDGE_PAYLOAD_TOO_LARGE", `a host call's result exceeded ${limits.maxBridgeCallBytes} bytes`);
        return;
      }
      this.settleRef?.apply(undefined, [id, ok, text]).catch((error: unknown) => this.taskFailed(error));
    });
  }

  private onTimer(id: number, ms: number): void {
    if (this.settled) return;
    const existing = this.timers.get(id);
    if (existing) clearTimeout(existing);
    this.timers.delete(id);
    if (ms < 0 || this.timers.size >= MAX_PENDING_TIMERS) return;
    const handle = setTimeout(() => {
      this.timers.delete(id);
      if (this.settled) return;
      this.fireRef?.apply(undefined, [id]).catch((error: unknown) => this.taskFailed(error));
    }, ms);
    this.timers.set(id, handle);
  }

  private onDone(kind: string, text: string): void {
    if (this.settled) return;
    // Settle after the callback returns: disposing an isolate from inside its own call is unsafe.
    this.later(() => this.finishWith(kind, text));
  }

  private finishWith(kind: string, text: string): void {
    if (this.settled) return;
    const codec = sharedCodec();
    const limits = this.request.limits;
    try {
      if (kind === "ok") {
        if (text.length > limits.maxOutputBytes + 64) {
          this.fail({
            code: "ERR_OUTPUT_TOO_LARGE",
            name: "CordonError",
            message: `the result is larger than the limit of ${limits.maxOutputBytes} bytes`,
          });
          return;
        }
        const parsed = JSON.parse(text) as { v: unknown; x: Record<string, unknown>; k: string[] };
        const exports = codec.decode(JSON.stringify({ $: "o", v: parsed.x })) as Record<string, unknown>;
        const value = codec.decode(JSON.stringify(parsed.v));
        this.settle({
          status: "completed",
          ok: true,
          value,
          exports,
          skippedExports: parsed.k.map(String),
          logs: this.logs,
          stats: this.stats(),
        });
        return;
      }
      if (kind === "fail") {
        const { code, message } = JSON.parse(text) as { code: ErrorCode; message: string };
        const safe: ErrorCode = code === "ERR_OUTPUT_TOO_LARGE" ? "ERR_OUTPUT_TOO_LARGE" : "ERR_NOT_SERIALIZABLE";
        this.fail({ code: safe, name: "TypeError", message: String(message) });
        return;
      }
      this.fail(guestThrown(codec.decode(text), this.guestFiles));
    } catch {
      this.fail({ code: "ERR_INTERNAL", name: "CordonError", message: "the guest's result could not be read" });
    }
  }

  /** A task inside the isolate threw: an uncaught exception, an unhandled rejection, or a disposal. */
  private taskFailed(error: unknown): void {
    if (this.settled) return;
    const message = (error as Error)?.message ?? "";
    if (this.isolate.isDisposed || /memory limit/.test(message)) {
      this.fail({
        code: "ERR_MEMORY_LIMIT",
        name: "CordonError",
        message: `the run exceeded its memory limit of ${this.request.limits.memoryMb} MB`,
      });
      return;
    }
    this.fail(guestThrown(error, this.guestFiles));
  }

  private setupFailed(error: unknown): void {
    if (this.settled) return;
    if (error instanceof CordonError) {
      this.fail({ code: error.code, name: error.name, message: error.message });
      return;
    }
    this.taskFailed(error);
  }

  // ---- outcome -----------------------------------------------------------------------------------
  private fail(error: RunError): void {
    if (error.stack) {
      let stack = sanitizeStack(error.stack, this.guestFiles);
      for (const [file, map] of this.lineMaps) stack = remapStack(stack, file, map);
      error.stack = stack;
    }
    this.settle({ status: "failed", ok: false, error, logs: this.logs, stats: this.stats() });
  }

  private aborted(reason: string): RunResult {
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
    if (this.logsTruncated) {
      const { maxLogEntries, maxLogBytes } = this.request.limits;
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
    // No heap figure for one-off runs: a synchronous heap read would wait for a spinning guest.
    return {
      engine: "v8",
      host: this.request.host,
      wallMs: round(performance.now() - this.started),
      cpuMs: this.cpuStartNs === 0n ? 0 : round(this.cpuMs()),
      bridgeCalls: this.bridgeCalls,
      warm: false,
    };
  }

  private cleanup(): void {
    for (const timer of this.limitTimers) clearTimeout(timer);
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    if (this.onAbort) this.request.signal?.removeEventListener("abort", this.onAbort);
    try {
      if (this.isolate && !this.isolate.isDisposed) this.isolate.dispose();
    } catch {}
  }

  private later(fn: () => void): void {
    setImmediate(fn);
  }
}

function describeCompileError(error: unknown, filename: string): string {
  const message = (error as Error)?.message ?? String(error);
  return `${filename}: ${message.replace(/\s*\[.*?\]$/, "")} ${message.match(/\[(.*?)\]$/)?.[0] ?? ""}`.trim();
}

function abortReason(reason: unknown): string {
  if (reason instanceof Error) return reason.message || reason.name;
  if (typeof reason === "string") return reason;
  return "aborted by the caller";
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
