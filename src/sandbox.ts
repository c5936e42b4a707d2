import { createHash } from "node:crypto";
import { availableParallelism, totalmem } from "node:os";
import { Bindings, sharedCodec, splitImports } from "./core/bindings.js";
import type { Engine, EnginePrefix, RunMode } from "./core/engine.js";
import { CordonError, type RunError } from "./core/errors.js";
import { checkLimits, checkPolicy, checkPositiveNumber, resolveLimits } from "./core/limits.js";
import { checkKnownKeys, checkObject, checkOneOf, checkSignal, checkString } from "./core/options.js";
import { readBodies } from "./core/fetch-wire.js";
import { abortedResult, failedResult } from "./core/results.js";
import { ENGINES, environmentDefaults, HOSTS } from "./core/selection.js";
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
  PrepareOptions,
  ReadExportsResult,
  RemoteOptions,
} from "./core/types.js";
import type { PooledEngineOptions } from "./engines/pooled-engine.js";
import { isolatedVmAvailable } from "./engines/v8/load.js";
import { brokeredFetch, checkNetPolicy } from "./capabilities.js";
import { isValidExportPath } from "./names.js";
import { Prefix, type PrefixBackend, type PrefixCallOptions, PrepareError, type PrefixRunOptions } from "./prefix.js";

const SANDBOX_KEYS = [
  "workers",
  "isolateProcesses",
  "engine",
  "host",
  "memoryMb",
  "memoryBudgetMb",
  "maxConcurrentRuns",
  "maxQueuedRuns",
  "policy",
  "spareInstances",
  "remote",
  "deno",
];
const RUN_KEYS = ["code", "input", "call", "filename", "globals", "imports", "limits", "signal", "capabilities", "files"];
const PREPARE_KEYS = ["code", "filename", "globals", "imports", "limits", "partitionKey", "capabilities", "files"];
const PREFIX_RUN_KEYS = ["code", "input", "filename", "limits", "signal"];
const CALL_KEYS = ["export", "args", "limits", "signal"];
const MAX_CODE_LENGTH = 16 * 1024 * 1024;

type ConcreteEngine = Exclude<EngineName, "auto">;
type ConcreteHost = Exclude<HostName, "auto">;

interface SharedPrefix {
  pool: Promise<{ pool: EnginePrefix; exports: Record<string, unknown>; skippedExports: string[] }>;
  handles: number;
}

/** Each sandbox's engine, for cordon's own executor (which serves remote hosts from the same engines). */
const engines = new WeakMap<Sandbox, Engine>();
export function engineOf(sandbox: Sandbox): Engine {
  const engine = engines.get(sandbox);
  if (!engine) throw new CordonError("ERR_INTERNAL", "cordon: not a sandbox");
  return engine;
}

/**
 * The facade: option checks, engine and host selection, run slots, prepared prefixes and stats.
 * The only thing users touch. Guest faults and limits come back as results; only
 * misconfiguration throws.
 */
export class Sandbox implements AsyncDisposable {
  private readonly slots: Slots;
  private readonly defaults: RunLimits;
  private readonly prefixes = new Map<string, SharedPrefix>();
  private readonly backend: PrefixBackend;
  private completedRuns = 0;
  private activeCalls = 0;
  private working = 0;
  private keepAlive: NodeJS.Timeout | undefined;
  /** Limits of a call that sets none: resolved once, calls are the hot path. */
  private readonly callLimits: ReturnType<typeof resolveLimits>;
  private disposed = false;

  constructor(
    private readonly engine: Engine,
    private readonly hostName: ConcreteHost,
    private readonly policy: SandboxPolicy,
    options: SandboxOptions,
  ) {
    engines.set(this, engine);
    this.slots = new Slots(options.maxConcurrentRuns ?? availableParallelism() * 4, options.maxQueuedRuns ?? 10_000);
    this.defaults = options.memoryMb === undefined ? {} : { memoryMb: options.memoryMb };
    this.callLimits = resolveLimits({}, this.defaults, policy);
    this.backend = {
      run: (pool, runOptions) => this.runOnPrefix(pool, runOptions),
      call: (pool, callOptions) => this.callOnPrefix(pool, callOptions),
      release: (key) => this.releasePrefix(key),
    };
  }

  get engineName(): ConcreteEngine {
    return this.engine.name;
  }

  /** Run a module once, in a fresh instance. */
  async run(options: RunOptions): Promise<RunResult> {
    this.check();
    const checked = this.checkRun(options, RUN_KEYS);
    const { sources, hostModules } = splitImports(options.imports);
    if (options.globals !== undefined) checkObject(options.globals, "globals");
    const fetch = await brokeredFetch(options.capabilities, this.policy, checked.limits);
    const bindings = new Bindings(options.globals, hostModules, fetch);
    const files = await this.checkFiles(options.files);
    const imports = this.importHosts(options.capabilities);
    const call = checkRunCall(options);
    if (call) {
      const started = performance.now();
      try {
        if (call.args.some((a) => a instanceof Request || a instanceof Response)) await readBodies(call.args);
      } catch (error) {
        return this.failure(started, { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: (error as Error).message });
      }
      return this.runFresh(checked, call, bindings, { ...sources, ...files }, "call", imports, "call");
    }
    return this.runFresh(checked, options.input, bindings, { ...sources, ...files }, "run", imports);
  }

  /** `capabilities.import` (checked with the other capabilities): only the deno engine imports remote modules. */
  private importHosts(capabilities: unknown): string[] | undefined {
    const hosts = (capabilities as { import?: unknown } | undefined)?.import;
    if (!Array.isArray(hosts)) return undefined;
    if (this.engine.name !== "deno") throw new TypeError('cordon: capabilities.import needs engine "deno"');
    return hosts as string[];
  }

  /** A multi-file source's other modules: the deno engine writes them beside the entry. */
  private async checkFiles(files: unknown): Promise<Record<string, string>> {
    if (files === undefined) return {};
    if (this.engine.name !== "deno") throw new TypeError('cordon: files (a multi-file source) needs engine "deno"');
    const { checkFiles } = await import("./engines/deno/modules.js");
    return checkFiles(files);
  }

  /** A run on a fresh instance, holding a run slot: `sandbox.run` and `readExports`. */
  private runFresh(
    checked: ReturnType<Sandbox["checkRun"]>,
    input: unknown,
    bindings: Bindings,
    sourceImports: Record<string, string>,
    mode: RunMode,
    imports?: string[],
    inputName = "input",
  ): Promise<RunResult> {
    return this.withSlot(checked.signal, async (started) => {
      const prepared = await this.sourceAndInput(started, checked.code, checked.filename, input, inputName);
      if ("result" in prepared) return prepared.result;
      const { limits, signal } = checked;
      const host = this.hostName;
      return this.engine.run({ ...prepared, sourceImports, bindings, limits, signal, host, mode, importHosts: imports });
    });
  }

  /**
   * Prepare a prefix: evaluate `code` with its globals and imports once and keep the instance warm.
   * The same code, bindings and partition key share one warm pool; different partition keys never
   * share an instance. Rejects with a PrepareError when the prefix module fails.
   */
  async prepare(options: PrepareOptions): Promise<Prefix> {
    this.hold(1);
    try {
      return await this.prepareHeld(options);
    } finally {
      this.hold(-1);
    }
  }

  private async prepareHeld(options: PrepareOptions): Promise<Prefix> {
    this.check();
    checkObject(options, "prepare options");
    checkKnownKeys(options, PREPARE_KEYS, "prepare options");
    const code = checkString(options.code, "code", MAX_CODE_LENGTH);
    const filename = options.filename === undefined ? DEFAULT_FILENAME : checkString(options.filename, "filename", 256);
    const partitionKey = options.partitionKey === undefined ? "" : checkString(options.partitionKey, "partitionKey", 256);
    const limits = resolveLimits(checkLimits(options.limits), this.defaults, this.policy);
    const { sources, hostModules } = splitImports(options.imports);
    if (options.globals !== undefined) checkObject(options.globals, "globals");
    const fetch = await brokeredFetch(options.capabilities, this.policy, limits);
    const bindings = new Bindings(options.globals, hostModules, fetch);
    Object.assign(sources, await this.checkFiles(options.files));
    const key = createHash("sha256")
      .update(
        JSON.stringify([
          code,
          filename,
          sources,
          bindings.text,
          bindings.identity,
          partitionKey,
          limits.memoryMb,
          options.capabilities ?? null,
        ]),
      )
      .digest("hex");

    let shared = this.prefixes.get(key);
    if (!shared) {
      const pool = (async () => {
        let source: Awaited<ReturnType<typeof normalizeSource>>;
        try {
          source = await normalizeSource(code, filename);
        } catch (error) {
          if (error instanceof CordonError)
            throw new PrepareError(
              this.failure(performance.now(), { code: error.code, name: "SyntaxError", message: error.message }),
            );
          throw error;
        }
        const { prefix, result } = await this.engine.prepare({
          partitionKey,
          key,
          source,
          sourceImports: sources,
          bindings,
          limits,
          host: this.hostName,
          importHosts: this.importHosts(options.capabilities),
        });
        if (!result.ok) throw new PrepareError(result);
        return { pool: prefix, exports: result.exports, skippedExports: result.skippedExports };
      })();
      shared = { pool, handles: 0 };
      this.prefixes.set(key, shared);
      pool.catch(() => {
        if (this.prefixes.get(key) === shared) this.prefixes.delete(key);
      });
    }
    shared.handles++;
    try {
      const { pool, exports, skippedExports } = await shared.pool;
      return new Prefix(key, exports, skippedExports, pool, this.backend);
    } catch (error) {
      shared.handles--;
      throw error;
    }
  }

  /** Evaluate a module and list its exports: function-valued exports are skipped and named, never an error. */
  async readExports(options: Pick<RunOptions, "code" | "filename" | "imports" | "limits" | "files">): Promise<ReadExportsResult> {
    this.check();
    const checked = this.checkRun(options as RunOptions, ["code", "filename", "imports", "limits", "files"]);
    const { sources, hostModules } = splitImports(options.imports);
    const files = await this.checkFiles(options.files);
    const outcome = await this.runFresh(checked, undefined, new Bindings({}, hostModules), { ...sources, ...files }, "prepare");
    if (!outcome.ok) throw new PrepareError(outcome);
    return { exports: outcome.exports, skippedExports: outcome.skippedExports };
  }

  stats(): SandboxStats {
    const engine = this.engine.stats();
    return {
      activeRuns: this.slots.activeCount + this.activeCalls,
      queueDepth: this.slots.queueDepth,
      completedRuns: this.completedRuns,
      warmInstances: engine.warmInstances,
      idleInstances: engine.idleInstances,
      idleHeapBytes: engine.idleHeapBytes,
      budgetBytes: engine.budgetBytes,
      spareInstances: engine.spareInstances,
      rssBytes: process.memoryUsage.rss(),
      prefixes: engine.prefixes,
      ...("workers" in engine ? { workers: (engine as { workers: SandboxStats["workers"] }).workers } : {}),
    };
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.prefixes.clear();
    this.hold(1);
    try {
      await this.engine.dispose();
    } finally {
      this.hold(-1);
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  // ---- prefixes -------------------------------------------------------------------------------
  private async runOnPrefix(pool: EnginePrefix, options: PrefixRunOptions): Promise<RunResult> {
    this.check();
    const checked = this.checkRun(options as RunOptions, PREFIX_RUN_KEYS);
    return this.withSlot(checked.signal, async (started) => {
      const prepared = await this.sourceAndInput(started, checked.code, checked.filename, options.input);
      if ("result" in prepared) return prepared.result;
      return pool.run({ ...prepared, sourceImports: {}, limits: checked.limits, signal: checked.signal });
    });
  }

  private async callOnPrefix(pool: EnginePrefix, options: PrefixCallOptions): Promise<RunResult> {
    this.check();
    checkObject(options, "call options");
    checkKnownKeys(options, CALL_KEYS, "call options");
    checkExportPath(options.export, "export");
    if (options.args !== undefined && !Array.isArray(options.args)) throw new TypeError("cordon: args must be an array");
    const signal = checkSignal(options.signal, "signal");
    const limits =
      options.limits === undefined ? this.callLimits : resolveLimits(checkLimits(options.limits), this.defaults, this.policy);
    // Calls do not take run slots: the prefix bounds its own instances and queues (and coalesces) the rest.
    const started = performance.now();
    this.activeCalls++;
    this.hold(1);
    try {
      let argsText: string;
      try {
        if (options.args?.some((a) => a instanceof Request || a instanceof Response)) await readBodies(options.args);
        argsText = sharedCodec().encode(options.args ?? [], "args");
      } catch (error) {
        return this.failure(started, { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: (error as Error).message });
      }
      return await pool.call({ path: options.export, argsText, limits, signal });
    } finally {
      this.activeCalls--;
      this.hold(-1);
      this.completedRuns++;
    }
  }

  private releasePrefix(key: string): void {
    const shared = this.prefixes.get(key);
    if (!shared) return;
    shared.handles--;
    if (shared.handles > 0) return;
    this.prefixes.delete(key);
    void shared.pool.then(
      ({ pool }) => pool.dispose(),
      () => {},
    );
  }

  // ---- shared steps ---------------------------------------------------------------------------
  private check(): void {
    if (this.disposed) throw new CordonError("ERR_INTERNAL", "cordon: this sandbox has been disposed");
  }

  private checkRun(options: RunOptions, keys: string[]) {
    checkObject(options, "run options");
    checkKnownKeys(options, keys, "run options");
    return {
      code: checkString(options.code, "code", MAX_CODE_LENGTH),
      filename: options.filename === undefined ? DEFAULT_FILENAME : checkString(options.filename, "filename", 256),
      signal: checkSignal(options.signal, "signal"),
      limits: resolveLimits(checkLimits(options.limits), this.defaults, this.policy),
    };
  }

  /** Hold a run slot for `work`; past the queue, ERR_QUEUE_FULL at once. */
  private async withSlot(signal: AbortSignal | undefined, work: (started: number) => Promise<RunResult>): Promise<RunResult> {
    const started = performance.now();
    const held = await this.slots.acquire(signal);
    if (!held) {
      if (signal?.aborted)
        return this.failure(started, { code: "ERR_ABORTED", name: "AbortError", message: "the run was aborted while queued" });
      return this.failure(started, {
        code: "ERR_QUEUE_FULL",
        name: "CordonError",
        message: `the run queue is full (${this.slots.queueDepth} waiting); retry later or raise maxQueuedRuns`,
      });
    }
    this.hold(1);
    try {
      return await work(started);
    } finally {
      this.hold(-1);
      this.completedRuns++;
      this.slots.release();
    }
  }

  /**
   * Work in progress keeps the host process alive, as any pending I/O would: engines and worker
   * processes unref themselves when idle (a sandbox nobody disposed must not hang its process).
   */
  private hold(delta: number): void {
    this.working += delta;
    if (this.working > 0) this.keepAlive ??= setInterval(() => {}, 1 << 30);
    else if (this.keepAlive) {
      clearInterval(this.keepAlive);
      this.keepAlive = undefined;
    }
  }

  /** Normalize the module and encode the input; a compile error or bad input is a result. */
  private async sourceAndInput(
    started: number,
    code: string,
    filename: string,
    input: unknown,
    inputName = "input",
  ): Promise<{ source: Awaited<ReturnType<typeof normalizeSource>>; inputText: string } | { result: RunResult }> {
    let inputText: string;
    try {
      inputText = sharedCodec().encode(input, inputName);
    } catch (error) {
      return {
        result: this.failure(started, { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: (error as Error).message }),
      };
    }
    try {
      return { source: await normalizeSource(code, filename), inputText };
    } catch (error) {
      if (error instanceof CordonError)
        return { result: this.failure(started, { code: error.code, name: "SyntaxError", message: error.message }) };
      throw error;
    }
  }

  /** A result for work that ended before reaching the engine (queue, input, compile). */
  private failure(started: number, error: RunError): RunResult & { ok: false } {
    const wallMs = performance.now() - started;
    if (error.code === "ERR_ABORTED") {
      const aborted = abortedResult(this.engine.name, this.hostName, error.message, wallMs);
      return { ...aborted, error: { ...error, code: "ERR_ABORTED" } };
    }
    return failedResult(this.engine.name, this.hostName, error, wallMs);
  }
}

/** Create a sandbox. Throws a TypeError naming the option for misconfiguration. */
export async function createSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  checkObject(options, "options");
  checkKnownKeys(options, SANDBOX_KEYS, "options");
  const fromEnvironment = environmentDefaults();
  const engineName = checkOneOf(options.engine ?? fromEnvironment.engine, ENGINES, "options.engine");
  const hostName = checkOneOf(options.host ?? fromEnvironment.host, HOSTS, "options.host");
  if (options.memoryMb !== undefined) checkPositiveNumber("options.memoryMb", options.memoryMb);
  if (options.maxConcurrentRuns !== undefined)
    checkPositiveNumber("options.maxConcurrentRuns", options.maxConcurrentRuns, { integer: true });
  if (options.maxQueuedRuns !== undefined && options.maxQueuedRuns !== 0) {
    checkPositiveNumber("options.maxQueuedRuns", options.maxQueuedRuns, { integer: true });
  }
  if (options.memoryBudgetMb !== undefined) checkPositiveNumber("options.memoryBudgetMb", options.memoryBudgetMb);
  if (options.spareInstances !== undefined && options.spareInstances !== 0) {
    checkPositiveNumber("options.spareInstances", options.spareInstances, { integer: true });
  }
  const policy = checkPolicy(options.policy);
  await checkNetPolicy(policy.net);

  const checked = options as SandboxOptions;
  const workers = checkWorkers(checked.workers);
  const isolateProcesses = checkOneOf(
    checked.isolateProcesses ?? "shared",
    ["shared", "partition"] as const,
    "options.isolateProcesses",
  );
  if (engineName === "trusted") {
    // No sandbox at all: it runs in this process, and only when named.
    if (hostName !== "auto" && hostName !== "inprocess") {
      throw new TypeError(
        `cordon: the trusted engine runs in this process; host must be "inprocess" or "auto", got "${hostName}"`,
      );
    }
    const { TrustedEngine } = await import("./engines/trusted/engine.js");
    return new Sandbox(new TrustedEngine(), "inprocess", policy, checked);
  }
  if (engineName === "deno") {
    // Each function gets Deno processes of its own, supervised from this process: the deno engine
    // is its own process host. "auto" means that; cordon's worker processes ("process") do not host it.
    if (hostName !== "auto" && hostName !== "inprocess") {
      throw new TypeError(
        `cordon: the deno engine runs every function in Deno processes of its own, supervised from this process; host must be "inprocess" or "auto", got "${hostName}"`,
      );
    }
  }
  // The deno engine never runs remotely: CORDON_EXEC_URL does not apply to it.
  const remote = engineName === "deno" ? undefined : checkRemote(checked.remote, fromEnvironment);
  const host = engineName === "deno" ? "inprocess" : selectHost(hostName, remote);
  if (host === "remote" && remote) {
    const { ExecutorClient } = await import("./hosts/remote/client.js");
    const { Callbacks } = await import("./hosts/remote/callbacks.js");
    const { RemoteHost } = await import("./hosts/remote/host.js");
    const client = new ExecutorClient(remote.url, remote.secret);
    // "auto" is the executor's choice: asked once, or guessed from what loads here when it is down.
    let name: "v8" | "quickjs";
    if (engineName === "v8" || engineName === "quickjs") name = engineName;
    else if (engineName === "auto") {
      const reported = await client.engine();
      name = reported === "v8" || reported === "quickjs" ? reported : isolatedVmAvailable() ? "v8" : "quickjs";
    } else throw new TypeError(`cordon: the remote host runs the v8 or quickjs engine, not "${engineName}"`);
    return new Sandbox(new RemoteHost(name, client, new Callbacks(remote.callback)), "remote", policy, checked);
  }
  const engineChoice = resolveEngine(engineName);
  const memoryMb = resolveLimits({}, checked.memoryMb === undefined ? {} : { memoryMb: checked.memoryMb }, policy).memoryMb;
  const budgetMb = checked.memoryBudgetMb ?? Math.min(1024, Math.floor(totalmem() / 1024 / 1024 / 4));
  const engineOptions: PooledEngineOptions = {
    memoryMb,
    spares: checked.spareInstances ?? 2,
    budgetBytes: budgetMb * 1024 * 1024,
    coalesceAbove: availableParallelism(),
    maxInstances: checked.maxConcurrentRuns ?? availableParallelism() * 4,
    maxQueued: checked.maxQueuedRuns ?? 10_000,
  };
  let engine: Engine;
  if (engineChoice === "deno") {
    const deno = checkDeno(checked.deno);
    const { createDenoEngine } = await import("./engines/deno/engine.js");
    const { cachedOnly, cacheDir, ...functions } = deno;
    engine = createDenoEngine({ ...engineOptions, functions, cachedOnly, cacheDir });
  } else if (host === "process") {
    const { ProcessHost } = await import("./hosts/process/host.js");
    engine = new ProcessHost(engineChoice as "v8" | "quickjs", engineOptions, {
      min: workers.min ?? 1,
      softCap: workers.max ?? availableParallelism(),
      idleTtlMs: workers.idleTtlMs ?? 60_000,
      maxRunsPerWorker: workers.maxRunsPerWorker ?? 10_000,
      maxRssMb: workers.maxRssMb,
      rssSlackMb: workers.rssSlackMb ?? 256,
      isolateProcesses,
      entry: workers.entry,
    });
  } else {
    engine = await createInProcessEngine(engineChoice as "v8" | "quickjs", engineOptions);
  }
  return new Sandbox(engine, host, policy, checked);
}

/** "auto": remote when an executor is configured, else the process host (a guest can then kill at most a worker). */
function selectHost(name: HostName, remote: RemoteOptions | undefined): ConcreteHost {
  if (name === "remote" && !remote) {
    throw new CordonError(
      "ERR_ENGINE_UNAVAILABLE",
      'cordon: host "remote" needs an executor: options.remote ({ url, secret }) or CORDON_EXEC_URL and CORDON_EXEC_SECRET',
    );
  }
  if (name === "remote" || (name === "auto" && remote)) return "remote";
  if (name === "auto" || name === "process") return "process";
  if (name === "inprocess") return "inprocess";
  throw new CordonError(
    "ERR_ENGINE_UNAVAILABLE",
    `cordon: host "${name}" is not available in this version; use "process", "inprocess" or "remote"`,
  );
}

/** `options.remote`, else the environment's executor; a URL without a usable secret is misconfiguration. */
function checkRemote(value: unknown, env: { execUrl?: string; execSecret?: string }): RemoteOptions | undefined {
  if (value === undefined) {
    if (!env.execUrl) return undefined;
    value = { url: env.execUrl, secret: env.execSecret };
  }
  checkObject(value, "options.remote");
  checkKnownKeys(value, ["url", "secret", "callback"], "options.remote");
  const url = checkString(value.url, "options.remote.url (or CORDON_EXEC_URL)", 2048);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`cordon: options.remote.url must be an http(s) URL, got ${JSON.stringify(url.slice(0, 80))}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new TypeError(`cordon: options.remote.url must be an http(s) URL, got ${JSON.stringify(url.slice(0, 80))}`);
  if (typeof value.secret !== "string" || Buffer.byteLength(value.secret) < 32) {
    // Never the secret itself in the message: it may end up in a log.
    throw new TypeError("cordon: options.remote.secret (or CORDON_EXEC_SECRET) must be the executor's secret, at least 32 bytes");
  }
  if (value.callback !== undefined) {
    checkObject(value.callback, "options.remote.callback");
    checkKnownKeys(value.callback, ["url", "rpc", "host", "port"], "options.remote.callback");
  }
  return value as unknown as RemoteOptions;
}

/** "auto": v8 when isolated-vm loads, else quickjs (no native build needed). Never deno: only when named. */
function resolveEngine(name: EngineName): "v8" | "quickjs" | "deno" {
  if (name === "deno") return "deno";
  if (name === "v8") {
    if (!isolatedVmAvailable())
      throw new CordonError("ERR_ENGINE_UNAVAILABLE", 'cordon: engine "v8" needs isolated-vm, which did not load here');
    return "v8";
  }
  if (name === "quickjs") return "quickjs";
  if (name === "auto") return isolatedVmAvailable() ? "v8" : "quickjs";
  throw new CordonError(
    "ERR_ENGINE_UNAVAILABLE",
    `cordon: engine "${name}" is not available in this version; use "v8" or "quickjs"`,
  );
}

async function createInProcessEngine(name: "v8" | "quickjs", options: PooledEngineOptions): Promise<Engine> {
  if (name === "v8") {
    const { createV8Engine } = await import("./engines/v8/engine.js");
    return createV8Engine(options);
  }
  const { quickjsAvailable } = await import("./engines/quickjs/threads.js");
  if (!quickjsAvailable()) throw new CordonError("ERR_ENGINE_UNAVAILABLE", "cordon: the quickjs engine's packages did not load");
  const { createQuickJSEngine } = await import("./engines/quickjs/engine.js");
  return createQuickJSEngine(options);
}

function checkDeno(value: unknown): NonNullable<SandboxOptions["deno"]> {
  if (value === undefined) return {};
  checkObject(value, "options.deno");
  checkKnownKeys(value, ["idleTtlMs", "maxInvocations", "softCap", "cachedOnly", "cacheDir"], "options.deno");
  for (const key of ["idleTtlMs", "maxInvocations", "softCap"]) {
    if (value[key] !== undefined) checkPositiveNumber(`options.deno.${key}`, value[key]);
  }
  if (value.cachedOnly !== undefined && typeof value.cachedOnly !== "boolean") {
    throw new TypeError("cordon: options.deno.cachedOnly must be a boolean");
  }
  if (value.cacheDir !== undefined) checkString(value.cacheDir, "options.deno.cacheDir", 4096);
  return value as NonNullable<SandboxOptions["deno"]>;
}

const WORKER_KEYS = ["min", "max", "idleTtlMs", "maxRunsPerWorker", "maxRssMb", "rssSlackMb", "entry"];

function checkWorkers(value: unknown): NonNullable<SandboxOptions["workers"]> & { entry?: string } {
  if (value === undefined) return {};
  checkObject(value, "options.workers");
  checkKnownKeys(value, WORKER_KEYS, "options.workers");
  for (const key of ["min", "max", "idleTtlMs", "maxRunsPerWorker", "maxRssMb", "rssSlackMb"]) {
    if (value[key] !== undefined) checkPositiveNumber(`options.workers.${key}`, value[key]);
  }
  return value as NonNullable<SandboxOptions["workers"]> & { entry?: string };
}

function checkExportPath(path: unknown, name: string): asserts path is string {
  if (!isValidExportPath(path)) {
    throw new TypeError(
      `cordon: ${name} must be a dotted export path such as "default" or "default.fetch", got ${JSON.stringify(path)}`,
    );
  }
}

/** `run({ call: { export, args } })`: which export a one-off run calls instead of the default with `input`. */
function checkRunCall(options: RunOptions): { export: string; args: unknown[] } | undefined {
  const call = options.call;
  if (call === undefined) return undefined;
  checkObject(call, "call");
  checkKnownKeys(call, ["export", "args"], "call");
  checkExportPath(call.export, "call.export");
  if (call.args !== undefined && !Array.isArray(call.args)) throw new TypeError("cordon: call.args must be an array");
  if (options.input !== undefined) throw new TypeError("cordon: a run takes input or call, not both (call passes args)");
  return { export: call.export, args: call.args ?? [] };
}
