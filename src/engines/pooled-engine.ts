import type { Engine, EnginePrepareRequest, EngineRunRequest, EngineStats } from "../core/engine.js";
import { CordonError } from "../core/errors.js";
import { Residency } from "../core/residency.js";
import { failedResult } from "../core/results.js";
import type { EngineName, RunResult } from "../core/types.js";
import { Execution } from "./execution.js";
import { RunningExecutions } from "./running-executions.js";
import type { EngineInstance } from "./instance.js";
import { Spares } from "./spares.js";
import { BlockingBudget } from "./blocking-budget.js";
import { WarmPool } from "./warm-pool.js";

/** No instance could be made (a worker died, an engine failed to load): a result, not a throw. */
export function instanceFailure(
  engine: Exclude<EngineName, "auto">,
  host: RunResult["stats"]["host"],
  error: unknown,
): RunResult {
  const code = error instanceof CordonError ? error.code : "ERR_INSTANCE_RESET";
  const message = `no ${engine} instance could be started: ${(error as Error)?.message ?? error}`;
  return failedResult(engine, host, { code, name: "CordonError", message });
}

export interface PooledEngineOptions {
  /** Memory of spare instances: the sandbox's default, so one-off runs usually find a spare. */
  memoryMb: number;
  spares: number;
  budgetBytes: number;
  /** Instances per prefix busy with calls that return at once, before calls coalesce. */
  coalesceAbove: number;
  /** Instances per prefix busy with calls that await. */
  maxInstances: number;
  maxQueued: number;
  /** The event loop keeps turning this long after engine traffic (core/busy-poll.ts); 0: off. */
  busyPollMs: number;
  /**
   * Quick warm calls run on this thread, blocking it (v8; set by process workers, whose loop
   * serves no caller: decision 012). Never in the caller's process.
   */
  syncCalls?: boolean;
  /**
   * How long a one-off run's cleanup (disposing its instance, then refilling the spares) waits
   * after its result; absent or 0: the loop's next turn. Process workers wait (worker-main.ts).
   */
  cleanupDelayMs?: number;
}

/**
 * An engine made of instances: one fresh instance per one-off run (taken from the spares), a
 * warm pool per prefix, one residency budget over all idle instances. Engines differ only in
 * how an instance is made (`create`) and what it is (EngineInstance).
 */
export class PooledEngine implements Engine {
  private readonly spares: Spares;
  private readonly residency: Residency;
  private readonly pools = new Set<WarmPool>();
  /** How long calls may block a thread, for all prefixes together (blocking-budget.ts). */
  private readonly blocking = new BlockingBudget();
  /** Runs and calls in progress, its prefixes' too: disposing the engine ends them. */
  private readonly running = new RunningExecutions();

  constructor(
    readonly name: Exclude<EngineName, "auto">,
    create: (memoryMb: number, ahead: boolean) => Promise<EngineInstance>,
    private readonly options: PooledEngineOptions,
    private readonly onDispose?: () => Promise<void>,
  ) {
    this.spares = new Spares(options.spares, options.memoryMb, create);
    this.residency = new Residency(options.budgetBytes);
  }

  expectRun(): void {
    this.spares.peek()?.wake?.();
  }

  async run(request: EngineRunRequest): Promise<RunResult> {
    const { limits, signal, host, source, sourceImports, inputText, bindings } = request;
    const guestFiles = new Set([source.filename, ...Object.keys(sourceImports)]);
    let instance: EngineInstance;
    this.spares.runStarted();
    try {
      // A ready spare without an await (a few µs of a one-off run's host time).
      instance = this.spares.takeNow(limits.memoryMb) ?? (await this.spares.take(limits.memoryMb));
    } catch (error) {
      this.spares.runEnded();
      return instanceFailure(this.name, host, error);
    }
    const execution = new Execution(instance, { engine: this.name, limits, signal, host, warm: false, guestFiles });
    // Through running.run: disposed while the instance was being made, the run ends with
    // ERR_INSTANCE_RESET instead of starting (and calling host functions) after dispose resolved.
    let result: RunResult;
    try {
      result = await this.running.run(execution, execution.outcome, () =>
        execution.evaluate({ bindings, mode: request.mode ?? "run", inputText, source, sourceImports }),
      );
    } catch (error) {
      this.spares.runEnded();
      throw error;
    }
    // One-off runs never share an instance: this one is done. Disposing an isolate takes about
    // half a millisecond on this thread (measured 2026-12-02), so it happens after the result is out.
    instance.listener = undefined;
    const cleanup = () => {
      instance.dispose();
      execution.drained();
      // After the result is delivered and the instance gone: a refill put off for the run starts.
      this.spares.runEnded();
    };
    const delayMs = this.options.cleanupDelayMs ?? 0;
    if (delayMs > 0) setTimeout(cleanup, delayMs);
    else setImmediate(cleanup);
    return result;
  }

  async prepare(request: EnginePrepareRequest): Promise<{ prefix: WarmPool; result: RunResult }> {
    const { coalesceAbove, maxInstances, maxQueued } = this.options;
    const limits = { coalesceAbove, maxInstances, blocking: this.blocking };
    const pool = new WarmPool(this.name, request, this.spares, this.residency, limits, maxQueued, this.running);
    pool.onDispose = () => this.pools.delete(pool);
    const { instance, result } = await pool.warmUp();
    // Disposed while the prefix was warming up (its heap measured, its tail fenced): adopted, the
    // instance outlived the sandbox, and prepare resolved with a prefix nothing could call.
    if (this.running.ended) {
      instance?.dispose();
      const message = "the sandbox was disposed while the prefix was being prepared";
      return {
        prefix: pool,
        result: failedResult(this.name, request.host, { code: "ERR_INSTANCE_RESET", name: "CordonError", message }),
      };
    }
    if (instance) {
      pool.adopt(instance);
      this.pools.add(pool);
    }
    return { prefix: pool, result };
  }

  /** Heap of the idle warm instances, as the residency budget counts it (cheaper than stats()). */
  get idleHeapBytes(): number {
    return this.residency.idleBytes;
  }

  /** Evict the idle warm instance with the highest heap × idle time (Residency.shedOne); returns its heap. */
  shedIdle(): number {
    return this.residency.shedOne();
  }

  stats(): EngineStats {
    const prefixes = [...this.pools].map((p) => p.counts());
    return {
      warmInstances: prefixes.reduce((n, p) => n + p.warm, 0),
      idleInstances: this.residency.idleCount,
      idleHeapBytes: this.residency.idleBytes,
      budgetBytes: this.residency.budgetBytes,
      spareInstances: this.spares.count,
      prefixes,
    };
  }

  async dispose(): Promise<void> {
    this.running.endAll();
    for (const pool of this.pools) pool.end();
    this.pools.clear();
    this.spares.dispose();
    await this.onDispose?.();
  }
}
