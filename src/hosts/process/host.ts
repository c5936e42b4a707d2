import type {
  Engine,
  EnginePrefix,
  EnginePrepareRequest,
  EngineRunRequest,
  EngineStats,
  PrefixCallRequest,
  PrefixCounts,
  PrefixRunRequest,
} from "../../core/engine.js";
import { signalReason } from "../../core/abort-reason.js";
import { abortedResult, heldPrefixResult } from "../../core/results.js";
import type { GuestSource } from "../../core/source.js";
import type { EngineName, RunResult } from "../../core/types.js";
import type { PooledEngineOptions } from "../../engines/pooled-engine.js";
import { instanceFailure } from "../../engines/pooled-engine.js";
import { untilAborted } from "../until-aborted.js";
import { WorkerPool, type WorkerPoolOptions } from "./pool.js";
import type { WorkerProcess } from "./worker.js";

/** A worker that has not answered within a run's wall time plus this is ended. */
const BACKSTOP_MS = 1000;

export interface WorkerStats {
  pid: number;
  partition: string;
  busy: number;
  runs: number;
  rssBytes: number;
}

/**
 * The process host: the engine runs in cordon's worker processes, supervised from here, so a
 * guest can kill at most a worker. It implements the same Engine seam as an in-process engine;
 * the sandbox cannot tell the difference except by `stats.host`.
 */
export class ProcessHost implements Engine {
  private readonly pool: WorkerPool;
  private readonly prefixes = new Set<ProcessPrefix>();
  /** Each worker's residency budget for its idle warm instances. */
  private readonly budgetBytes: number;
  private expectingImports = false;

  constructor(
    readonly name: Exclude<EngineName, "auto">,
    engineOptions: PooledEngineOptions,
    poolOptions: WorkerPoolOptions,
    pipePollMs: number,
  ) {
    this.budgetBytes = engineOptions.budgetBytes;
    const engine = name === "quickjs" ? "quickjs" : "v8";
    this.pool = new WorkerPool(name, { engine, engineOptions, pipePollMs }, poolOptions);
  }

  async run(request: EngineRunRequest): Promise<RunResult> {
    let worker: WorkerProcess;
    try {
      // Its key's own workers with isolateProcesses "partition" (the pool ignores keys otherwise).
      worker = await this.pool.pick(request.partitionKey ?? "");
    } catch (error) {
      return instanceFailure(this.name, "process", error);
    }
    const { source, sourceImports, bindings, inputText, limits, mode, signal } = request;
    this.noteSourceImports(source, sourceImports);
    return worker.request(
      { t: "run", id: 0, source: forWorker(source), sourceImports, bindingsText: bindings.text, inputText, limits, mode },
      bindings,
      limits.memoryMb,
      signal,
      limits.wallTimeMs + BACKSTOP_MS,
    );
  }

  async prepare(request: EnginePrepareRequest): Promise<{ prefix: EnginePrefix; result: RunResult }> {
    this.noteSourceImports(request.source, request.sourceImports);
    const prefix = new ProcessPrefix(this.name, this.pool, request, () => this.prefixes.delete(prefix));
    const { result } = await prefix.ensure();
    if (result.ok) this.prefixes.add(prefix);
    return { prefix, result };
  }

  /**
   * Once a run brings source imports its module may load, workers started after it have esbuild
   * ready for theirs. A module with a script form imports nothing: the imports beside it (unused,
   * or not even parsing) start no esbuild in every later worker, every tenant's.
   */
  private noteSourceImports(source: EngineRunRequest["source"], sourceImports: Record<string, string>): void {
    if (this.expectingImports || source.script !== undefined || Object.keys(sourceImports).length === 0) return;
    this.expectingImports = true;
    this.pool.expectSourceImports();
  }

  /** The workers' engines report their own stats with every answer: this sums them. */
  stats(): EngineStats & { workers: WorkerStats[] } {
    const workers = this.pool.list().filter((w) => w.alive && w.pid);
    const reported = workers.map((w) => w.engineStats).filter((s): s is EngineStats => s !== undefined);
    const sum = (pick: (s: EngineStats) => number) => reported.reduce((n, s) => n + pick(s), 0);
    return {
      warmInstances: sum((s) => s.warmInstances),
      idleInstances: sum((s) => s.idleInstances),
      idleHeapBytes: sum((s) => s.idleHeapBytes),
      budgetBytes: this.budgetBytes,
      spareInstances: sum((s) => s.spareInstances),
      prefixes: withWaiting(
        reported.flatMap((s) => s.prefixes),
        [...this.prefixes].map((p) => p.counts()),
      ),
      workers: workers.map((w) => ({
        pid: w.pid,
        partition: w.partition,
        busy: w.busy,
        runs: w.runs,
        rssBytes: w.lastRss || (w.rss() ?? 0),
      })),
    };
  }

  async dispose(): Promise<void> {
    for (const prefix of this.prefixes) prefix.dispose();
    this.prefixes.clear();
    await this.pool.dispose();
  }
}

/** What a prepare left: its result, and the worker and handle that hold the prefix when it evaluated. */
interface Prepared {
  result: RunResult;
  worker?: WorkerProcess;
  handle?: number;
}

/**
 * A prefix held by a worker process. When its worker dies or is recycled, the next run or call
 * prepares it again in another worker (that run is cold); nothing else notices.
 */
class ProcessPrefix implements EnginePrefix {
  private worker: WorkerProcess | undefined;
  private handle: number | undefined;
  private owner = 0;
  private preparing: Promise<Prepared> | undefined;
  /**
   * Runs and calls waiting for the prefix to be prepared again: made before a dispose, they are
   * served by the new copy, which goes once they are sent (a call made just before dispose()
   * failed with "the worker process running this was lost", sent to the dead worker: found by review).
   */
  private waiting = 0;
  private disposed = false;

  constructor(
    private readonly engine: Exclude<EngineName, "auto">,
    private readonly pool: WorkerPool,
    private readonly request: EnginePrepareRequest,
    private readonly onDispose: () => void,
  ) {}

  /** A live worker that is not retiring holds it: a recycled worker gets no new work, so its prefixes move. */
  private held(): boolean {
    // Runs sent to the worker holding the prefix pick no worker: without this, one worker took
    // 12 prefix runs with maxRunsPerWorker 2 (the pool looks only at picks and once a second).
    if (this.worker) this.pool.retireIfWornOut(this.worker);
    return this.worker?.usable === true && this.handle !== undefined;
  }

  /** Make sure a live worker holds this prefix; the prepare's result says whether it evaluated. */
  ensure(): Promise<Prepared> {
    if (this.held())
      return Promise.resolve({ result: heldPrefixResult(this.engine, "process"), worker: this.worker, handle: this.handle });
    // Retiring: prepare elsewhere. Calls already sent there finish (with their bindings); the
    // worker ends, and its copy of the prefix with it, once it has none left. Dead: forgotten,
    // or a call waiting for the new copy was sent to the dead worker.
    this.worker = undefined;
    this.handle = undefined;
    this.preparing ??= this.prepareOnce().finally(() => {
      this.preparing = undefined;
    });
    return this.preparing;
  }

  private async prepareOnce(): Promise<Prepared> {
    const { key, source, sourceImports, bindings, limits, partitionKey } = this.request;
    let worker: WorkerProcess;
    try {
      worker = await this.pool.pick(partitionKey ?? "");
    } catch (error) {
      return { result: instanceFailure(this.engine, "process", error) };
    }
    const answer = await worker.prepare(
      { t: "prepare", key, source: forWorker(source), sourceImports, bindingsText: bindings.text, limits },
      bindings,
      limits.memoryMb,
      limits.wallTimeMs + BACKSTOP_MS,
    );
    if (answer.prefix === undefined) return { result: answer.result };
    this.worker = worker;
    this.handle = answer.prefix;
    this.owner = answer.owner;
    // Disposed while it was prepared again, and nothing waits for it: it goes at once (dispose()
    // found no worker to tell, and the new copy stayed in the worker for good: found by review).
    if (this.disposed && this.waiting === 0) this.dropCopy();
    return { result: answer.result, worker, handle: answer.prefix };
  }

  async run(request: PrefixRunRequest): Promise<RunResult> {
    return this.send(request.limits, request.signal, (handle) => ({
      t: "prefix-run",
      id: 0,
      prefix: handle,
      source: forWorker(request.source),
      inputText: request.inputText,
      limits: request.limits,
    }));
  }

  async call(request: PrefixCallRequest): Promise<RunResult> {
    return this.send(request.limits, request.signal, (handle) => ({
      t: "prefix-call",
      id: 0,
      prefix: handle,
      path: request.path,
      argsText: request.argsText,
      limits: request.limits,
    }));
  }

  private async send(
    limits: PrefixRunRequest["limits"],
    signal: AbortSignal | undefined,
    message: (handle: number) => Parameters<WorkerProcess["request"]>[0],
  ): Promise<RunResult> {
    if (this.held()) return this.start(this.worker as WorkerProcess, this.handle as number, true, limits, signal, message);
    let answer: Promise<RunResult>;
    this.waiting++;
    try {
      const prepared = await untilAborted(this.ensure(), signal);
      if (!prepared) return abortedResult(this.engine, "process", signalReason(signal as AbortSignal));
      const { result, worker, handle } = prepared;
      if (!result.ok) return notPreparedAgain(result);
      if (!worker || handle === undefined) return instanceFailure(this.engine, "process", new Error("the prefix has no worker"));
      // Sent now, before the last waiter lets a dispose take the copy (frames keep their order).
      answer = this.start(worker, handle, false, limits, signal, message);
    } finally {
      this.waiting--;
      if (this.disposed && this.waiting === 0) this.dropCopy();
    }
    return answer;
  }

  /** Send a run or call to the worker holding the prefix (its engine there counts it busy). */
  private async start(
    worker: WorkerProcess,
    handle: number,
    warm: boolean,
    limits: PrefixRunRequest["limits"],
    signal: AbortSignal | undefined,
    message: (handle: number) => Parameters<WorkerProcess["request"]>[0],
  ): Promise<RunResult> {
    const result = await worker.request(message(handle), undefined, limits.memoryMb, signal, limits.wallTimeMs + BACKSTOP_MS);
    if (!warm) result.stats.warm = false;
    return result;
  }

  /**
   * What the host knows and the workers do not: runs and calls waiting for a re-prepare, as
   * `queued`. The worker holding the prefix reports its instances (warm, idle, busy) itself.
   */
  counts(): PrefixCounts {
    return { key: this.request.key.slice(0, 16), warm: 0, idle: 0, busy: 0, queued: this.waiting };
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    // Runs and calls waiting for a new copy were made before this: the last of them drops it.
    if (this.waiting === 0) this.dropCopy();
    this.onDispose();
  }

  /** Tell the worker holding the prefix to dispose of it (calls already sent there are served). */
  private dropCopy(): void {
    if (this.worker?.alive && this.handle !== undefined) this.worker.disposePrefix(this.handle, this.owner);
    this.worker = undefined;
    this.handle = undefined;
  }
}

/**
 * A module as a worker needs it: its engines (v8, quickjs) evaluate the script form whenever
 * there is one and never read the module form then. Sent both, a frame carried the module twice,
 * each copy through JSON.stringify here and JSON.parse there (a 20 KB module: a 67 KB frame).
 */
function forWorker(source: GuestSource): GuestSource {
  return source.script ? { ...source, code: "", lineMap: [] } : source;
}

/**
 * The workers' reports of their prefixes, with the runs and calls waiting on the host for a
 * re-prepare added to their prefix's `queued`: while no worker holds it, the prefix is listed
 * from those alone (it was missing from stats, and its waiting calls with it).
 */
function withWaiting(reported: PrefixCounts[], host: PrefixCounts[]): PrefixCounts[] {
  const prefixes = reported.map((p) => ({ ...p }));
  for (const waiting of host) {
    if (waiting.queued === 0) continue;
    const listed = prefixes.find((p) => p.key === waiting.key);
    if (listed) listed.queued += waiting.queued;
    else prefixes.push(waiting);
  }
  return prefixes;
}

/**
 * A prefix that no longer evaluates in a new worker (a host function now throws, a limit): each
 * waiting run or call gets its own copy of that failure, saying it was the prefix that failed.
 */
function notPreparedAgain(result: RunResult & { ok: false }): RunResult {
  const message = `the prefix could not be prepared again in a new worker process (its worker was recycled or lost): ${result.error.message}`;
  return {
    ...result,
    error: { ...result.error, message },
    logs: [...result.logs],
    stats: { ...result.stats, warm: false },
  } as RunResult;
}
