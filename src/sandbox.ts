import { availableParallelism } from "node:os";
import { Bindings, sharedCodec, splitImports } from "./core/bindings.js";
import type { Engine } from "./core/engine.js";
import { CordonError, type RunError } from "./core/errors.js";
import { checkLimits, checkPolicy, checkPositiveNumber, resolveLimits } from "./core/limits.js";
import { checkKnownKeys, checkObject, checkOneOf, checkSignal, checkString } from "./core/options.js";
import { Slots } from "./core/slots.js";
import { DEFAULT_FILENAME, normalizeSource } from "./core/source.js";
import type {
  EngineName,
  HostName,
  RunLimits,
  RunOptions,
  RunResult,
  SandboxOptions,
  SandboxPolicy,
  SandboxStats,
} from "./core/types.js";
import { isolatedVmAvailable } from "./engines/v8/load.js";

const ENGINES: readonly EngineName[] = ["auto", "v8", "quickjs", "deno", "trusted"];
const HOSTS: readonly HostName[] = ["auto", "inprocess", "process", "remote"];
const SANDBOX_KEYS = ["engine", "host", "memoryMb", "maxConcurrentRuns", "maxQueuedRuns", "policy"];
const RUN_KEYS = ["code", "input", "filename", "globals", "imports", "limits", "signal"];
const MAX_CODE_LENGTH = 16 * 1024 * 1024;

type ConcreteEngine = Exclude<EngineName, "auto">;
type ConcreteHost = Exclude<HostName, "auto">;

/**
 * The facade: option checks, engine and host selection, run slots and stats. The only thing
 * users touch. Guest faults and limits come back as results; only misconfiguration throws.
 */
export class Sandbox implements AsyncDisposable {
  private readonly slots: Slots;
  private readonly defaults: RunLimits;
  private completedRuns = 0;
  private disposed = false;

  constructor(
    private readonly engine: Engine,
    private readonly hostName: ConcreteHost,
    private readonly policy: SandboxPolicy,
    options: SandboxOptions,
  ) {
    this.slots = new Slots(options.maxConcurrentRuns ?? availableParallelism() * 4, options.maxQueuedRuns ?? 10_000);
    this.defaults = options.memoryMb === undefined ? {} : { memoryMb: options.memoryMb };
  }

  get engineName(): ConcreteEngine {
    return this.engine.name;
  }

  async run(options: RunOptions): Promise<RunResult> {
    if (this.disposed) throw new CordonError("ERR_INTERNAL", "cordon: this sandbox has been disposed");
    checkObject(options, "run options");
    checkKnownKeys(options, RUN_KEYS, "run options");
    const code = checkString(options.code, "code", MAX_CODE_LENGTH);
    const filename = options.filename === undefined ? DEFAULT_FILENAME : checkString(options.filename, "filename", 256);
    const signal = checkSignal(options.signal, "signal");
    const limits = resolveLimits(checkLimits(options.limits), this.defaults, this.policy);
    if (options.globals !== undefined) checkObject(options.globals, "globals");
    const { sources, hostModules } = splitImports(options.imports);
    const bindings = new Bindings(options.globals, hostModules);

    const started = performance.now();
    const held = await this.slots.acquire(signal);
    if (!held) {
      if (signal?.aborted)
        return this.earlyResult(started, {
          code: "ERR_ABORTED",
          name: "AbortError",
          message: "the run was aborted while queued",
        });
      return this.earlyResult(started, {
        code: "ERR_QUEUE_FULL",
        name: "CordonError",
        message: `the run queue is full (${this.slots.queueDepth} waiting); retry later or raise maxQueuedRuns`,
      });
    }
    try {
      let inputText: string;
      try {
        inputText = sharedCodec().encode(options.input, "input");
      } catch (error) {
        return this.earlyResult(started, { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: (error as Error).message });
      }
      let source: Awaited<ReturnType<typeof normalizeSource>>;
      try {
        source = await normalizeSource(code, filename);
      } catch (error) {
        if (error instanceof CordonError)
          return this.earlyResult(started, { code: error.code, name: "SyntaxError", message: error.message });
        throw error;
      }
      return await this.engine.run({ source, sourceImports: sources, bindings, inputText, limits, signal, host: this.hostName });
    } finally {
      this.completedRuns++;
      this.slots.release();
    }
  }

  stats(): SandboxStats {
    return { activeRuns: this.slots.activeCount, queueDepth: this.slots.queueDepth, completedRuns: this.completedRuns };
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    await this.engine.dispose();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  /** A result for a run that ended before reaching the engine (queue, input, compile). */
  private earlyResult(started: number, error: RunError): RunResult {
    const stats = {
      engine: this.engine.name,
      host: this.hostName,
      wallMs: Math.round((performance.now() - started) * 1000) / 1000,
      cpuMs: 0,
      bridgeCalls: 0,
      warm: false,
    };
    if (error.code === "ERR_ABORTED") {
      return { status: "aborted", ok: false, reason: error.message, error: { ...error, code: "ERR_ABORTED" }, logs: [], stats };
    }
    return { status: "failed", ok: false, error, logs: [], stats };
  }
}

/** Create a sandbox. Throws a TypeError naming the option for misconfiguration. */
export async function createSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  checkObject(options, "options");
  checkKnownKeys(options, SANDBOX_KEYS, "options");
  const engineName = checkOneOf(options.engine ?? "auto", ENGINES, "options.engine");
  const hostName = checkOneOf(options.host ?? "auto", HOSTS, "options.host");
  if (options.memoryMb !== undefined) checkPositiveNumber("options.memoryMb", options.memoryMb);
  if (options.maxConcurrentRuns !== undefined)
    checkPositiveNumber("options.maxConcurrentRuns", options.maxConcurrentRuns, { integer: true });
  if (options.maxQueuedRuns !== undefined && options.maxQueuedRuns !== 0) {
    checkPositiveNumber("options.maxQueuedRuns", options.maxQueuedRuns, { integer: true });
  }
  const policy = checkPolicy(options.policy);

  const host = selectHost(hostName);
  const engine = await selectEngine(engineName);
  return new Sandbox(engine, host, policy, options);
}

function selectHost(name: HostName): ConcreteHost {
  if (name === "auto" || name === "inprocess") return "inprocess";
  throw new CordonError("ERR_ENGINE_UNAVAILABLE", `cordon: host "${name}" is not available in this version; use "inprocess"`);
}

async function selectEngine(name: EngineName): Promise<Engine> {
  if (name === "auto" || name === "v8") {
    if (name === "auto" && !isolatedVmAvailable()) {
      throw new CordonError("ERR_ENGINE_UNAVAILABLE", "cordon: no engine is available (isolated-vm did not load)");
    }
    const { V8Engine } = await import("./engines/v8/engine.js");
    return new V8Engine();
  }
  throw new CordonError("ERR_ENGINE_UNAVAILABLE", `cordon: engine "${name}" is not available in this version; use "v8"`);
}
