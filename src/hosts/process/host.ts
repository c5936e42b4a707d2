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
import { heldPrefixResult } from "../../core/results.js";
import type { EngineName, RunResult } from "../../core/types.js";
import type { PooledEngineOptions } from "../../engines/pooled-engine.js";
import { instanceFailure } from "../../engines/pooled-engine.js";
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
      worker = await this.pool.pick("");
    } catch (error) {
      return instanceFailure(this.name, "process", error);
    }
    const { source, sourceImports, bindings, inputText, limits, mode, signal } = request;
    return worker.request(
      { t: "run", id: 0, source, sourceImports, bindingsText: bindings.text, inputText, limits, mode },
      bindings,
      limits.memoryMb,
      signal,
      limits.wallTimeMs + BACKSTOP_MS,
    );
  }

  async prepare(request: EnginePrepareRequest): Promise<{ prefix: EnginePrefix; result: RunResult }> {
    const prefix = new ProcessPrefix(this.name, this.pool, request, () => this.prefixes.delete(prefix));
    const result = await prefix.ensure();
    if (result.ok) this.prefixes.add(prefix);
    return { prefix, result };
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
      prefixes: reported.flatMap((s) => s.prefixes),
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

/**
 * A prefix held by a worker process. When its worker dies or is recycled, the next run or call
 * prepares it again in another worker (that run is cold); nothing else notices.
 */
class ProcessPrefix implements EnginePrefix {
  private worker: WorkerProcess | undefined;
  private handle: number | undefined;
  private owner = 0;
  private preparing: Promise<RunResult> | undefined;
  private busy = 0;
  private disposed = false;

  constructor(
    private readonly engine: Exclude<EngineName, "auto">,
    private readonly pool: WorkerPool,
    private readonly request: EnginePrepareRequest,
    private readonly onDispose: () => void,
  ) {}

  /** A live worker that is not retiring holds it: a recycled worker gets no new work, so its prefixes move. */
  private held(): boolean {
    return this.worker?.usable === true && this.handle !== undefined;
  }

  /** Make sure a live worker holds this prefix; the prepare's result says whether it evaluated. */
  ensure(): Promise<RunResult> {
    if (this.held()) return Promise.resolve(heldPrefixResult(this.engine, "process"));
    if (this.worker?.alive && this.handle !== undefined) {
      // Retiring: prepare elsewhere. Calls already sent there finish (with their bindings); the
      // worker ends, and its copy of the prefix with it, once it has none left.
      this.worker = undefined;
      this.handle = undefined;
    }
    this.preparing ??= this.prepareOnce().finally(() => {
      this.preparing = undefined;
    });
    return this.preparing;
  }

  private async prepareOnce(): Promise<RunResult> {
    const { key, source, sourceImports, bindings, limits, partitionKey } = this.request;
    let worker: WorkerProcess;
    try {
      worker = await this.pool.pick(partitionKey ?? "");
    } catch (error) {
      return instanceFailure(this.engine, "process", error);
    }
    const answer = await worker.prepare(
      { t: "prepare", key, source, sourceImports, bindingsText: bindings.text, limits },
      bindings,
      limits.memoryMb,
      limits.wallTimeMs + BACKSTOP_MS,
    );
    if (answer.prefix !== undefined) {
      // Disposed while it was prepared again (after its worker died or was recycled): dispose()
      // found no worker to tell, and the new copy stayed in the worker for good (found by review).
      if (this.disposed) {
        worker.disposePrefix(answer.prefix, answer.owner as number);
        return answer.result;
      }
      this.worker = worker;
      this.handle = answer.prefix;
      this.owner = answer.owner;
    }
    return answer.result;
  }

  async run(request: PrefixRunRequest): Promise<RunResult> {
    return this.send(request.limits, request.signal, (handle) => ({
      t: "prefix-run",
      id: 0,
      prefix: handle,
      source: request.source,
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
    const warm = this.held();
    if (!warm) {
      const prepared = await this.ensure();
      if (!prepared.ok) return prepared;
    }
    const worker = this.worker;
    const handle = this.handle;
    if (!worker || handle === undefined) return instanceFailure(this.engine, "process", new Error("the prefix has no worker"));
    this.busy++;
    try {
      const result = await worker.request(message(handle), undefined, limits.memoryMb, signal, limits.wallTimeMs + BACKSTOP_MS);
      if (!warm) result.stats.warm = false;
      return result;
    } finally {
      this.busy--;
    }
  }

  counts(): PrefixCounts {
    const held = this.held() ? 1 : 0;
    return { key: this.request.key.slice(0, 16), warm: held, idle: this.busy === 0 ? held : 0, busy: this.busy, queued: 0 };
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    if (this.worker?.alive && this.handle !== undefined) this.worker.disposePrefix(this.handle, this.owner);
    this.onDispose();
  }
}
