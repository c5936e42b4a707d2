import { CordonError } from "../../core/errors.js";
import type { EngineName } from "../../core/types.js";
import { watchdogAvailable } from "./rss.js";
import { watchLoop } from "./loop-stalls.js";
import { rssBudget } from "./rss-budget.js";
import { useSpawner } from "../../core/spawner.js";
import { StartBackoff } from "./start-backoff.js";
import { WorkerProcess } from "./worker.js";
import type { WorkerConfig } from "./worker-main.js";

export interface WorkerPoolOptions {
  /** Workers kept even when idle. Default 1. */
  min: number;
  /** Workers beyond which idle ones are ended, least recently used first. Past it the pool still grows rather than failing a run. */
  softCap: number;
  /** An idle worker beyond `min` is ended after this long. */
  idleTtlMs: number;
  /** A worker is recycled (no new work, ended when idle) after this many runs (one-off and prefix runs; calls do not count). */
  maxRunsPerWorker: number;
  /** A hard cap on one worker's resident size; default: its calibrated base + the memory of its runs in flight + its warm heap + slack. */
  maxRssMb?: number;
  rssSlackMb: number;
  /** "partition": each partition key gets workers of its own. Default "shared". */
  isolateProcesses: "shared" | "partition";
  /** Test hook: another worker entry script. */
  entry?: string;
}

const LIFECYCLE_MS = 1000;

/**
 * cordon's worker processes: started, watched, recycled and ended here. A worker that dies fails
 * only the work inside it and is replaced; no worker outlives the pool.
 */
export class WorkerPool {
  private readonly workers: WorkerProcess[] = [];
  /** Stops the RSS watchdog: each worker's resident size read on the host's tick (loop-stalls.ts). */
  private readonly unwatch: () => void;
  private readonly lifecycle: NodeJS.Timeout;
  private disposed = false;
  /** This pool's use of the spawner process, released when it is disposed. */
  private readonly releaseSpawner: () => void;
  /** Why the last worker could not be started. */
  private startError = "";
  private readonly backoff = new StartBackoff();
  /** What workers are started with: their memory budget's rule included, so they can keep within it. */
  private readonly config: WorkerConfig;

  constructor(
    private readonly engine: Exclude<EngineName, "auto">,
    config: Omit<WorkerConfig, "rss">,
    private readonly options: WorkerPoolOptions,
  ) {
    const maxBytes = options.maxRssMb === undefined ? undefined : options.maxRssMb * 1024 * 1024;
    this.config = { ...config, rss: { slackBytes: options.rssSlackMb * 1024 * 1024, maxBytes } };
    if (process.platform === "linux" && !watchdogAvailable()) {
      throw new CordonError(
        "ERR_ENGINE_UNAVAILABLE",
        'cordon: the process host needs /proc to watch its workers\' memory, and /proc cannot be read here; use host "inprocess" or mount /proc',
      );
    }
    this.unwatch = watchLoop({ tick: () => this.checkMemory(), busy: () => this.workers.some((w) => w.busy > 0) });
    this.lifecycle = setInterval(() => this.tend(), LIFECYCLE_MS);
    this.lifecycle.unref();
    // Started beside the first workers (spawned here until it is ready): later ones, replacements
    // and recycled ones, start without blocking this process's event loop.
    this.releaseSpawner = useSpawner();
    for (let i = 0; i < options.min; i++) this.spawn("");
  }

  list(): readonly WorkerProcess[] {
    return this.workers;
  }

  /** A started worker for `partition`: the least busy one, or a new one. */
  async pick(partition: string): Promise<WorkerProcess> {
    if (this.disposed) throw new CordonError("ERR_INSTANCE_RESET", "the sandbox was disposed");
    const key = this.options.isolateProcesses === "partition" ? partition : "";
    // Here, not only on the lifecycle timer: checked once a second, one worker took 20 runs
    // with maxRunsPerWorker 3 (a busy service, thousands past it).
    for (const worker of this.workers) this.retireIfWornOut(worker);
    const mine = this.workers.filter((w) => w.usable && w.partition === key);
    // A worker still starting (grown for load, a successor) takes a run only when no started one
    // can: the run would wait for its start, ~0.5 s here, where a busy started worker takes ms.
    const started = mine.filter((w) => w.pid > 0);
    let best = (started.length > 0 ? started : mine).reduce<WorkerProcess | undefined>(
      (a, b) => (!a || b.busy < a.busy ? b : a),
      undefined,
    );
    if (!best) best = this.spawn(key);
    else if (best.busy > 0 && mine.length < this.options.softCap) this.spawn(key); // for the next run
    if (!best) throw new CordonError("ERR_INSTANCE_RESET", `cordon: a worker process could not be started: ${this.startError}`);
    try {
      await best.started();
      return best;
    } catch (error) {
      // Ended by dispose() while it started: "the worker exited while starting (signal SIGKILL)" said nothing of why.
      if (this.disposed)
        throw new CordonError("ERR_INSTANCE_RESET", "the sandbox was disposed while a worker process was starting");
      throw new CordonError("ERR_INSTANCE_RESET", `cordon: a worker process failed to start: ${(error as Error).message}`);
    }
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    this.unwatch();
    clearInterval(this.lifecycle);
    const ending = this.workers.map(
      (w) =>
        new Promise<void>((resolve) => {
          if (!w.alive) return resolve();
          w.onDeath(() => resolve());
          w.kill("ERR_INSTANCE_RESET", "the sandbox was disposed");
        }),
    );
    await Promise.all(ending);
    this.workers.length = 0;
    this.releaseSpawner();
  }

  /**
   * The sandbox's runs bring source imports, which workers compile: workers started from now on
   * start esbuild's service as they start (WorkerConfig.startEsbuild).
   */
  expectSourceImports(): void {
    this.config.startEsbuild = true;
  }

  /**
   * Start a worker, or return undefined when it cannot be (`startError` says why). Never throws:
   * it runs from a worker's exit handler and the lifecycle timer, where a throw ends the host.
   */
  private spawn(partition: string): WorkerProcess | undefined {
    const refusal = this.backoff.refusal();
    if (refusal) {
      this.startError = refusal;
      return undefined;
    }
    let worker: WorkerProcess;
    try {
      worker = new WorkerProcess(this.engine, { config: this.config, partition, entry: this.options.entry });
    } catch (error) {
      // A full or missing temp directory, out of file descriptors or processes.
      this.startError = (error as Error)?.message ?? String(error);
      this.backoff.failed(this.startError);
      return undefined;
    }
    worker.started().then(
      () => this.backoff.started(),
      () => {},
    );
    worker.onDeath((gone, cause) => {
      const index = this.workers.indexOf(gone);
      if (index >= 0) this.workers.splice(index, 1);
      for (const [successor, predecessor] of this.successors) {
        if (successor === gone || predecessor === gone) this.successors.delete(successor);
      }
      // Counted before the replacement below is tried: it may have to wait.
      if (!gone.pid && !this.disposed) this.backoff.failed(cause);
      // Keep the minimum of shared workers: a dead one is replaced.
      if (!this.disposed && gone.partition === "" && this.count("") < this.options.min) this.spawn("");
    });
    this.workers.push(worker);
    return worker;
  }

  private count(partition: string): number {
    return this.workers.filter((w) => w.usable && w.partition === partition).length;
  }

  /** The RSS watchdog: a worker past its budget is killed; one of its runs is blamed (WorkerProcess.killForMemory). */
  private checkMemory(): void {
    const rule = this.config.rss;
    for (const worker of this.workers) {
      if (!worker.alive || !worker.pid) continue;
      const rss = worker.rss();
      if (rss === undefined) continue;
      const budget = rssBudget(rule, {
        base: worker.baseRss,
        inFlight: worker.memoryInFlight,
        warmHeap: worker.warmHeapBytes,
        held: worker.keptBytes,
      });
      if (rss > budget) {
        worker.killForMemory(`its resident size reached ${mb(rss)} MB, past its budget of ${mb(budget)} MB`);
      }
    }
  }

  /**
   * A worker past maxRunsPerWorker takes no new runs; it ends once idle (tend). Also asked by a
   * prefix before it sends to the worker holding it: its runs pick no worker.
   *
   * Its successor starts earlier, in its last tenth of runs, so the runs after it need not wait
   * for a worker to start (measured: 0.5–0.6 s, every maxRunsPerWorker runs, on the run that
   * found only the worn-out worker). Below 10 runs there is no tenth: it starts at retirement.
   */
  retireIfWornOut(worker: WorkerProcess): void {
    const max = this.options.maxRunsPerWorker;
    if (!worker.alive || worker.retiring) return;
    if (worker.runs >= max - Math.floor(max / 10)) this.startSuccessor(worker);
    if (worker.runs < max) return;
    worker.retiring = true;
    if (worker.partition === "" && this.count("") < this.options.min) this.spawn("");
  }

  /** Workers started for one that is wearing out, and it: kept from eviction until it is gone. */
  private readonly successors = new Map<WorkerProcess, WorkerProcess>();

  private startSuccessor(worker: WorkerProcess): void {
    if ([...this.successors.values()].includes(worker) || this.disposed) return;
    const successor = this.spawn(worker.partition);
    if (successor) this.successors.set(successor, worker);
  }

  /** A successor whose predecessor still serves: idle by design, not to be ended for it. */
  private awaitedSuccessor(worker: WorkerProcess): boolean {
    const predecessor = this.successors.get(worker);
    if (predecessor?.alive) return true;
    this.successors.delete(worker);
    return false;
  }

  /** Recycling, idle TTL and the soft cap. */
  private tend(): void {
    const now = performance.now();
    for (const worker of this.workers) {
      if (!worker.alive) continue;
      if (worker.pid) worker.pollStats();
      this.retireIfWornOut(worker);
      if (worker.retiring && worker.busy === 0)
        worker.kill("ERR_INSTANCE_RESET", worker.unsound ?? "recycled after its maximum number of runs");
    }
    // Replacements that could not start earlier (backing off) are tried again here.
    for (let n = this.count(""); n < this.options.min; n++) if (!this.spawn("")) break;
    // A worker still starting is never idle: a run is waiting for it (ending it failed that run).
    const idle = this.workers
      .filter((w) => w.usable && w.pid && w.busy === 0 && !this.awaitedSuccessor(w))
      .sort((a, b) => a.lastUsed - b.lastUsed);
    // A successor and its predecessor count once against the soft cap: one replaces the other.
    let alive = this.workers.filter((w) => w.alive && !this.awaitedSuccessor(w)).length;
    for (const worker of idle) {
      const shared = this.count("");
      const keep = worker.partition === "" && shared <= this.options.min;
      const expired = now - worker.lastUsed > this.options.idleTtlMs;
      if (!keep && (expired || alive > this.options.softCap)) {
        worker.kill("ERR_INSTANCE_RESET", expired ? "idle past its time to live" : "evicted: the pool is past its soft cap");
        alive--;
      }
    }
  }
}

function mb(bytes: number): number {
  return Math.round(bytes / 1024 / 1024);
}
