import { createHash } from "node:crypto";
import { setMaxListeners } from "node:events";
import { availableParallelism } from "node:os";
import { type Bindings, bindingsFor, sharedCodec, splitImports } from "./core/bindings.js";
import type { Engine, EnginePrefix, RunMode } from "./core/engine.js";
import { CordonError } from "./core/errors.js";
import { checkLimits, type ResolvedLimits, resolveLimits } from "./core/limits.js";
import { MAX_CODE_LENGTH, checkModuleName, checkObject, checkSignal, checkString } from "./core/options.js";
import { hostWire, needsBodies } from "./core/fetch-wire.js";
import { hostServices } from "./engines/host-services.js";
import { signalAborted } from "./core/abort-reason.js";
import { failedResult } from "./core/results.js";
import { Slots } from "./core/slots.js";
import { compileBound, startEsbuild } from "./core/esbuild-calls.js";
import { DEFAULT_FILENAME, normalizeSource } from "./core/source.js";
import type {
  DefaultExportKind,
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
} from "./core/types.js";
import { DEFAULT_EXPORT_KINDS } from "./core/types.js";
import { brokeredFetch, importHosts } from "./capabilities.js";
import {
  CALL_KEYS,
  checkExportPath,
  checkPartitionKey,
  checkRunCall,
  ownRunOptions,
  PREFIX_RUN_KEYS,
  PREPARE_KEYS,
  RUN_KEYS,
} from "./run-options.js";
import { Prefix, type PrefixBackend, type PrefixCallOptions, PrepareError, type PrefixRunOptions } from "./prefix.js";
import { type CheckedRun, RunStart } from "./run-start.js";
import { SharedPreparation } from "./shared-preparation.js";

// Node loads its fetch implementation (undici) on the wire's first touch of the fetch globals,
// and the load installs a global dispatcher symbol: here, at import, not in the middle of a run.
// (A process host worker, which never imports this, does without it: core/fetch-wire.ts.)
// The Requests it encodes carry the host's parse of their URL, which the v8 and QuickJS guests
// keep (every host sends calls' arguments as this process encoded them).
hostWire().sendUrlParts((url) => hostServices.parseUrl(url));

/** Where a run's input bodies are, as errors name it. */
const INPUT = "in the run's input";

type ConcreteEngine = Exclude<EngineName, "auto">;
type ConcreteHost = Exclude<HostName, "auto">;

/** A prepared prefix, as every Prefix handle of its key shares it. */
interface PreparedPrefix {
  pool: EnginePrefix;
  exports: Record<string, unknown>;
  skippedExports: string[];
  defaultExport: DefaultExportKind | undefined;
}

/**
 * Preparations still evaluating that every caller waiting for them left (PrepareOptions.signal):
 * each holds a run slot until it finishes. For cordon's own executor, whose /health counts them.
 */
export function unclaimedPreparations(sandbox: Sandbox): number {
  let count = 0;
  for (const preparation of preparations.get(sandbox)?.values() ?? []) if (preparation.unclaimed) count++;
  return count;
}
const preparations = new WeakMap<Sandbox, Map<string, SharedPreparation<PreparedPrefix>>>();

/** Each sandbox's engine, for cordon's own executor (which serves remote hosts from the same engines). */
const engines = new WeakMap<Sandbox, Engine>();
export function engineOf(sandbox: Sandbox): Engine {
  const engine = engines.get(sandbox);
  if (!engine) throw new CordonError("ERR_INTERNAL", "cordon: not a sandbox");
  return engine;
}

/**
 * The facade: run options checked, run slots, prepared prefixes and stats, over the engine that
 * createSandbox (create-sandbox.ts) chose. The only thing users touch. Guest faults and limits come back as results; only
 * misconfiguration throws.
 */
export class Sandbox implements AsyncDisposable {
  private readonly slots: Slots;
  private readonly defaults: RunLimits;
  private readonly prefixes = new Map<string, SharedPreparation<PreparedPrefix>>();
  private readonly backend: PrefixBackend;
  private completedRuns = 0;
  private activeCalls = 0;
  private working = 0;
  private keepAlive: NodeJS.Timeout | undefined;
  /** Limits of a call that sets none: resolved once, calls are the hot path. */
  private readonly callLimits: ReturnType<typeof resolveLimits>;
  private disposed = false;
  /** Aborted by dispose: ends the compiles still running for this sandbox. */
  private readonly lifetime = new AbortController();
  /** The steps before the engine, and results of work that ends there (run-start.ts). */
  private readonly runStart: RunStart;

  constructor(
    private readonly engine: Engine,
    private readonly hostName: ConcreteHost,
    private readonly policy: SandboxPolicy,
    options: SandboxOptions,
  ) {
    engines.set(this, engine);
    preparations.set(this, this.prefixes);
    // Each compile in progress listens on it: many at once are not a leak.
    setMaxListeners(0, this.lifetime.signal);
    this.runStart = new RunStart(engine.name, hostName, this.lifetime.signal);
    this.slots = new Slots(options.maxConcurrentRuns ?? availableParallelism() * 4, options.maxQueuedRuns ?? 10_000);
    this.defaults = options.memoryMb === undefined ? {} : { memoryMb: options.memoryMb };
    this.callLimits = resolveLimits({}, this.defaults, policy);
    this.backend = {
      run: (pool, runOptions) => this.runOnPrefix(pool, runOptions),
      call: (pool, callOptions) => this.callOnPrefix(pool, callOptions),
      release: (key) => this.releasePrefix(key),
    };
    // Every run's module is compiled here: esbuild's service starts now, beside the engine's
    // spares, not in the first run's wall time (the spares' warm-up modules, made at build time,
    // no longer start it).
    startEsbuild();
  }

  get engineName(): ConcreteEngine {
    return this.engine.name;
  }

  /**
   * Run a module once, in a fresh instance (the deno engine: its function's process, never
   * another partition's; RunOptions.partitionKey).
   */
  async run(options: RunOptions): Promise<RunResult> {
    this.check();
    this.engine.expectRun?.();
    options = ownRunOptions(options, RUN_KEYS, "run options");
    const checked = this.checkRun(options);
    const partitionKey = checkPartitionKey(options.partitionKey);
    const call = checkRunCall(options);
    const { sources, hostModules } = splitImports(options.imports);
    if (options.globals !== undefined) checkObject(options.globals, "globals");
    // What a run did not pass is not awaited: each await was a few µs of a one-off run's host time.
    const { capabilities } = options;
    const fetch = capabilities === undefined ? undefined : await brokeredFetch(capabilities, this.policy, checked.limits);
    const bindings = bindingsFor(options.globals, hostModules, fetch);
    const files = options.files === undefined ? undefined : await this.checkFiles(options.files);
    const imports = capabilities === undefined ? undefined : await this.importHosts(capabilities);
    const values = call ? call.args : [options.input];
    const unread = needsBodies(values)
      ? await this.runStart.readBodiesFirst(values, checked, call ? undefined : INPUT)
      : undefined;
    if (unread) return unread;
    const sourceImports = files === undefined ? sources : { ...sources, ...files };
    if (call) return this.runFresh(checked, call, bindings, sourceImports, "call", imports, "call", partitionKey);
    return this.runFresh(checked, options.input, bindings, sourceImports, "run", imports, "input", partitionKey);
  }

  /** `capabilities.import` (checked with the other capabilities): only the deno engine imports remote modules. */
  private async importHosts(capabilities: unknown): Promise<string[] | undefined> {
    const hosts = (capabilities as { import?: unknown } | undefined)?.import;
    if (!Array.isArray(hosts)) return undefined;
    if (this.engine.name !== "deno") throw new TypeError('cordon: capabilities.import needs engine "deno"');
    return importHosts(capabilities, this.policy);
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
    checked: CheckedRun,
    input: unknown,
    bindings: Bindings,
    sourceImports: Record<string, string>,
    mode: RunMode,
    imports?: string[],
    inputName = "input",
    partitionKey = "",
  ): Promise<RunResult> {
    return this.withSlot(checked.signal, async () => {
      const begun = performance.now();
      let prepared = this.runStart.sourceAndInput(begun, checked, input, inputName);
      if (prepared instanceof Promise) prepared = await prepared;
      if ("result" in prepared) return prepared.result;
      const { signal } = checked;
      const host = this.hostName;
      return this.runStart.afterCompile(begun, checked.limits, (limits) =>
        // Named fields, not `...prepared`: decision 023.
        this.engine.run({
          source: prepared.source,
          inputText: prepared.inputText,
          sourceImports,
          bindings,
          limits,
          callerLimits: checked.limits,
          signal,
          host,
          mode,
          importHosts: imports,
          partitionKey,
        }),
      );
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
    options = ownRunOptions(options, PREPARE_KEYS, "prepare options");
    const begun = performance.now();
    const code = checkString(options.code, "code", MAX_CODE_LENGTH);
    const filename = options.filename === undefined ? DEFAULT_FILENAME : checkModuleName(options.filename, "filename", 256);
    const partitionKey = checkPartitionKey(options.partitionKey);
    const limits = resolveLimits(checkLimits(options.limits), this.defaults, this.policy);
    const signal = checkSignal(options.signal, "signal");
    // Aborted already: nothing is made for it (a fetch broker, a shared evaluation).
    if (signal && signalAborted(signal)) throw new PrepareError(this.runStart.abortedBy(signal, begun));
    const { sources, hostModules } = splitImports(options.imports);
    if (options.globals !== undefined) checkObject(options.globals, "globals");
    const fetch = await brokeredFetch(options.capabilities, this.policy, limits);
    const bindings = bindingsFor(options.globals, hostModules, fetch);
    Object.assign(sources, await this.checkFiles(options.files));
    const imports = await this.importHosts(options.capabilities);
    const key = createHash("sha256")
      .update(
        JSON.stringify([
          code,
          filename,
          sources,
          bindings.text,
          bindings.identity,
          partitionKey,
          // Every limit of the evaluation, not only its memory: two prepares differing only in
          // their budget shared the first one's evaluation, and the generous caller was refused
          // by the strict one's cpuTimeMs (found by review).
          limits,
          options.capabilities ?? null,
        ]),
      )
      .digest("hex");

    let shared = this.prefixes.get(key);
    if (!shared) {
      const made: SharedPreparation<PreparedPrefix> = new SharedPreparation(
        (wanted, start) =>
          this.evaluatePrefix(wanted, start, { key, code, filename, partitionKey, limits, sources, bindings, imports }),
        () => {
          if (this.prefixes.get(key) === made) this.prefixes.delete(key);
        },
      );
      shared = made;
      this.prefixes.set(key, made);
    }
    const { pool, exports, skippedExports, defaultExport } = await shared.wait(
      signal,
      () => new PrepareError(this.runStart.abortedBy(signal as AbortSignal, begun)),
    );
    return new Prefix(key, exports, skippedExports, defaultExport, pool, this.backend);
  }

  /**
   * A prefix's compile and evaluation: a run's work, so they hold a run slot and
   * maxConcurrentRuns bounds them too (the executor's cold /run compiled and evaluated every
   * distinct module at once). The prefix's calls take no slot (its pool bounds them). `wanted`
   * aborts when every caller left while it waits for its slot; `start` says it has one.
   */
  private async evaluatePrefix(
    wanted: AbortSignal,
    start: () => void,
    prefix: {
      key: string;
      code: string;
      filename: string;
      partitionKey: string | undefined;
      limits: ResolvedLimits;
      sources: Record<string, string>;
      bindings: Bindings;
      imports: readonly string[] | undefined;
    },
  ): Promise<PreparedPrefix> {
    const { key, code, filename, partitionKey, limits, sources, bindings, imports } = prefix;
    let evaluated: Awaited<ReturnType<Engine["prepare"]>> | undefined;
    const slotted = await this.withSlot(wanted, async (started) => {
      start();
      let source: Awaited<ReturnType<typeof normalizeSource>>;
      try {
        source = await normalizeSource(code, filename, compileBound(limits.wallTimeMs, this.lifetime.signal));
      } catch (error) {
        return this.runStart.compileFailure(started, error);
      }
      evaluated = await this.engine.prepare({
        partitionKey,
        key,
        source,
        sourceImports: sources,
        bindings,
        limits,
        host: this.hostName,
        importHosts: imports,
      });
      return evaluated.result;
    });
    if (!slotted.ok) throw new PrepareError(slotted);
    const { prefix: pool } = evaluated as NonNullable<typeof evaluated>;
    // Disposed while the engine prepared it (the remote executor, a Deno process, answered
    // after): nothing may outlive the sandbox, and a prefix nothing could call is no success.
    if (this.disposed) {
      pool.dispose();
      const message = "the sandbox was disposed while the prefix was being prepared";
      throw new PrepareError(
        failedResult(this.engine.name, this.hostName, { code: "ERR_INSTANCE_RESET", name: "CordonError", message }),
      );
    }
    const defaultExport = defaultExportOf(slotted.value);
    return { pool, exports: slotted.exports, skippedExports: slotted.skippedExports, defaultExport };
  }

  /** Evaluate a module and list its exports: function-valued exports are skipped and named, never an error. */
  async readExports(options: Pick<RunOptions, "code" | "filename" | "imports" | "limits" | "files">): Promise<ReadExportsResult> {
    this.check();
    const keys = ["code", "filename", "imports", "limits", "files"];
    options = ownRunOptions(options, keys, "run options");
    const checked = this.checkRun(options as RunOptions);
    const { sources, hostModules } = splitImports(options.imports);
    const files = await this.checkFiles(options.files);
    const outcome = await this.runFresh(
      checked,
      undefined,
      bindingsFor(undefined, hostModules, undefined),
      { ...sources, ...files },
      "prepare",
    );
    if (!outcome.ok) throw new PrepareError(outcome, "module");
    return { exports: outcome.exports, skippedExports: outcome.skippedExports, defaultExport: defaultExportOf(outcome.value) };
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
    this.lifetime.abort(new CordonError("ERR_INSTANCE_RESET", "the sandbox was disposed while the module was compiling"));
    this.prefixes.clear();
    // Runs still queued for a slot never start.
    this.slots.close();
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
    options = ownRunOptions(options, PREFIX_RUN_KEYS, "run options");
    const checked = this.checkRun(options as RunOptions);
    const unread = needsBodies([options.input])
      ? await this.runStart.readBodiesFirst([options.input], checked, INPUT)
      : undefined;
    if (unread) return unread;
    return this.withSlot(checked.signal, async () => {
      const begun = performance.now();
      let prepared = this.runStart.sourceAndInput(begun, checked, options.input);
      if (prepared instanceof Promise) prepared = await prepared;
      if ("result" in prepared) return prepared.result;
      return this.runStart.afterCompile(begun, checked.limits, (limits) =>
        pool.run({ source: prepared.source, inputText: prepared.inputText, sourceImports: {}, limits, signal: checked.signal }),
      );
    });
  }

  private async callOnPrefix(pool: EnginePrefix, options: PrefixCallOptions): Promise<RunResult> {
    this.check();
    options = ownRunOptions(options, CALL_KEYS, "call options");
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
      let argsText: string | undefined;
      try {
        const args = options.args ?? [];
        // Plain data (nearly every call) is encoded without first looking for bodies to read.
        argsText = sharedCodec().encodeFast(args, "args");
        if (argsText === undefined) {
          const unread = await this.runStart.readBodiesFirst(args, { limits, signal });
          if (unread) return unread;
          argsText = sharedCodec().encode(args, "args", Number.POSITIVE_INFINITY, false);
        }
      } catch (error) {
        return this.runStart.failure(started, {
          code: "ERR_NOT_SERIALIZABLE",
          name: "TypeError",
          message: (error as Error).message,
        });
      }
      // Aborted already: answered here, or the call took an idle warm instance that its abort then discarded.
      if (signal && signalAborted(signal)) return this.runStart.abortedBy(signal, started);
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
    void shared.ready.then(
      ({ pool }) => pool.dispose(),
      () => {},
    );
  }

  // ---- shared steps ---------------------------------------------------------------------------
  private check(): void {
    if (this.disposed) throw new CordonError("ERR_INSTANCE_RESET", "cordon: this sandbox has been disposed");
  }

  /** `options`: ownRunOptions's copy, its keys checked already. */
  private checkRun(options: RunOptions): CheckedRun {
    return {
      code: checkString(options.code, "code", MAX_CODE_LENGTH),
      filename: options.filename === undefined ? DEFAULT_FILENAME : checkModuleName(options.filename, "filename", 256),
      signal: checkSignal(options.signal, "signal"),
      limits: resolveLimits(checkLimits(options.limits), this.defaults, this.policy),
    };
  }

  /** Hold a run slot for `work`; past the queue, ERR_QUEUE_FULL at once. */
  private async withSlot(signal: AbortSignal | undefined, work: (started: number) => Promise<RunResult>): Promise<RunResult> {
    const started = performance.now();
    const held = await this.slots.acquire(signal);
    if (!held) {
      if (this.disposed) return this.disposedBeforeStart(started);
      // The caller's reason, as every other abort reports it (prefix.call did; runs said "queued",
      // even pre-aborted runs that never queued).
      if (signal && signalAborted(signal)) return this.runStart.abortedBy(signal, started);
      return this.runStart.failure(started, {
        code: "ERR_QUEUE_FULL",
        name: "CordonError",
        message: `the run queue is full (${this.slots.queueDepth} waiting); retry later or raise maxQueuedRuns`,
      });
    }
    // Disposed in the tick the run was asked for, its slot free: it never starts, as a queued one
    // never does (it went on to fail in the engine, whose message said a worker was lost).
    if (this.disposed) {
      this.slots.release();
      return this.disposedBeforeStart(started);
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

  private disposedBeforeStart(started: number): RunResult {
    const message = "the sandbox was disposed before the run started";
    return this.runStart.failure(started, { code: "ERR_INSTANCE_RESET", name: "CordonError", message });
  }

  /**
   * Work in progress keeps the host process alive, as any pending I/O would: engines and worker
   * processes unref themselves when idle (a sandbox nobody disposed must not hang its process).
   * One timer, ref'd and unref'd: sequential calls would otherwise arm and clear one each.
   */
  private hold(delta: number): void {
    this.working += delta;
    if (this.working > 0) {
      this.keepAlive ??= setInterval(() => {}, 1 << 30);
      this.keepAlive.ref();
    } else if (this.disposed) {
      clearInterval(this.keepAlive);
      this.keepAlive = undefined;
    } else this.keepAlive?.unref();
  }
}

/**
 * A prepare-mode outcome's value is the guest runtime's (or trusted engine's) `typeof` of the
 * default export, undefined without one: checked, since it was written in the guest's realm.
 */
function defaultExportOf(kind: unknown): DefaultExportKind | undefined {
  return typeof kind === "string" && (DEFAULT_EXPORT_KINDS as readonly string[]).includes(kind)
    ? (kind as DefaultExportKind)
    : undefined;
}
