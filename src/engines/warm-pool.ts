import type { EnginePrefix, EnginePrepareRequest, PrefixCallRequest, PrefixCounts, PrefixRunRequest } from "../core/engine.js";
import { ENCODED_UNDEFINED } from "../core/codec.js";
import { LIMIT_CODES } from "../core/errors.js";
import type { ResolvedLimits } from "../core/limits.js";
import type { Residency, Resident } from "../core/residency.js";
import { abortedResult, failedResult } from "../core/results.js";
import type { EngineName, RunResult } from "../core/types.js";
import { CallQueue, type Queued, sameLimits } from "./call-queue.js";
import { Execution } from "./execution.js";
import type { RunningExecutions } from "./running-executions.js";
import type { BlockingBudget } from "./blocking-budget.js";
import { ExportSpeeds } from "./export-speeds.js";
import { HeapSampler } from "./heap-sampler.js";
import { instanceFailure } from "./pooled-engine.js";
import { type EngineInstance, type RuntimeCaps, fence } from "./instance.js";
import type { Spares } from "./spares.js";

/** At most this many waiting calls cross together. */
const MAX_COALESCED = 64;
/**
 * ...and at most this many characters of arguments (the first call always goes). Past 128 KB
 * (64 K two-byte characters) V8 allocates a string in its large-object space, on both sides of the
 * crossing: joining six 25 KB batches took 134 µs, five 13 µs. Measured, 32 events a call with 8
 * in flight: 173-227k events/s without the bound, 275-342k with it.
 */
const MAX_COALESCED_CHARS = 60_000;

export interface PrefixPoolLimits {
  /** Instances busy with calls that return at once; past it, calls wait and coalesce. */
  coalesceAbove: number;
  /** Instances busy with calls that await (host calls, timers). */
  maxInstances: number;
  /**
   * How long calls may still block the thread: the engine's one budget, shared by all its
   * prefixes (a budget each let a tenant with 20 prefixes hold a process worker's loop ~80% of
   * the time: red team, 2026-12-06).
   */
  blocking: BlockingBudget;
}

function queueFull(engine: RunResult["stats"]["engine"], host: RunResult["stats"]["host"], depth: number): RunResult {
  const message = `the prefix's call queue is full (${depth} waiting); retry later or raise maxQueuedRuns`;
  return failedResult(engine, host, { code: "ERR_QUEUE_FULL", name: "CordonError", message });
}

/**
 * The warm pool of one prefix: instances that have evaluated the prefix module, reused for
 * runs and calls. One execution owns an instance at a time; concurrent work gets more instances.
 */
export class WarmPool implements EnginePrefix {
  private readonly idle: EngineInstance[] = [];
  private readonly queue = new CallQueue((reason) => abortedResult(this.engine, this.request.host, reason));
  /** Runs whose result is out, while their instance finishes what the guest left queued. */
  private readonly fencing = new Set<Promise<void>>();
  /** What this pool has learned of its exports: gathering, blocking, instances for awaiting ones. */
  private readonly speeds: ExportSpeeds;
  private readonly residents = new Map<EngineInstance, Resident>();
  private readonly heap = new HeapSampler((instance) => {
    const resident = this.residents.get(instance);
    if (resident) this.residency.recount(resident);
  });
  private busy = 0;
  /** Instances being warmed up for bursts (grow): not busy, not idle yet. */
  private growing = 0;
  /** A gather is scheduled for the end of this tick. */
  private gathering = false;
  private disposed = false;
  private readonly guestFiles: Set<string>;
  /** Every instance this pool has warmed (dropped ones pruned as the next is taken): see sitesInUse. */
  private readonly warmed = new Set<EngineInstance>();

  constructor(
    private readonly engine: Exclude<EngineName, "auto">,
    private readonly request: EnginePrepareRequest,
    private readonly spares: Spares,
    private readonly residency: Residency,
    private readonly limits: PrefixPoolLimits,
    private readonly maxQueued: number,
    /** The engine's executions in progress: disposing the engine ends them, this pool's too. */
    private readonly running: RunningExecutions,
  ) {
    this.guestFiles = new Set([request.source.filename, ...Object.keys(request.sourceImports)]);
    this.speeds = new ExportSpeeds(limits.blocking);
  }

  /** Create a warm instance: bootstrap, install the prefix's bindings, evaluate the prefix module. */
  async warmUp(signal?: AbortSignal): Promise<{ instance?: EngineInstance; result: RunResult }> {
    const { source, sourceImports, bindings, limits, host } = this.request;
    let instance: EngineInstance;
    try {
      instance = await this.spares.take(limits.memoryMb, this.sitesInUse());
    } catch (error) {
      return { result: instanceFailure(this.engine, host, error) };
    }
    this.warmed.add(instance);
    const execution = new Execution(instance, {
      engine: this.engine,
      limits,
      signal,
      host,
      warm: false,
      guestFiles: this.guestFiles,
    });
    const result = await this.running.run(execution, execution.outcome, () => {
      execution.evaluate({ bindings, mode: "prepare", inputText: ENCODED_UNDEFINED, source, sourceImports });
    });
    if (!result.ok) {
      execution.drained();
      instance.dispose();
      return { result: prefixFailure(result, limits) };
    }
    // The residency budget needs the heap of a warm instance before it goes idle (and what the
    // prefix's top level left running stays under its limits until then: Execution.drained).
    try {
      await this.heap.measure(instance);
      // What the top level left running is over before the instance serves a call.
      await fence(instance, limits.wallTimeMs);
    } catch {
      // A limit fired meanwhile (checkLingering): the instance is tainted, and discarded on release.
    } finally {
      execution.drained();
    }
    return { instance, result };
  }

  /**
   * The sites (QuickJS threads) this pool's live instances run on. A new instance goes elsewhere
   * when a spare there is ready: a prefix's two instances on one thread served every call on one
   * core while the other thread idled (QuickJS events, 64 in flight: 21-25k/s, one thread at 100%).
   */
  private sitesInUse(): Set<object> {
    const sites = new Set<object>();
    for (const instance of this.warmed) {
      if (instance.disposed) this.warmed.delete(instance);
      else if (instance.site !== undefined) sites.add(instance.site);
    }
    return sites;
  }

  adopt(instance: EngineInstance): void {
    this.release(instance, true); // measured in warmUp
  }

  async run(request: PrefixRunRequest): Promise<RunResult> {
    const acquired = await this.acquire(request.signal);
    if ("result" in acquired) return acquired.result;
    const { instance, warm } = acquired;
    const { limits, signal } = request;
    const guestFiles = new Set([...this.guestFiles, request.source.filename, ...Object.keys(request.sourceImports)]);
    const execution = this.track(
      instance,
      () => new Execution(instance, { engine: this.engine, limits, signal, host: this.request.host, warm, guestFiles }),
    );
    const { source, sourceImports, inputText } = request;
    // The prefix's own line maps, as the postfix may replace one under the same filename (the
    // default "<guest>"): restored after the run, or the prefix's later errors named wrong lines.
    const prefixMaps = new Map(instance.lineMaps);
    // Warming up an instance for this run can outlast the sandbox: running.run checks.
    const result = await this.running.run(execution, execution.outcome, () => {
      execution.evaluate({ mode: "run", inputText, source, sourceImports });
    });
    instance.lineMaps.clear();
    for (const [file, map] of prefixMaps) instance.lineMaps.set(file, map);
    // The result is out; wait until the instance is idle before another run may own it. Its heap
    // is measured before the budget counts it: a postfix may grow globals (ten runs that each
    // kept 40 MB were counted at their warm-up heap, 12.6 MB in all, under a 16 MB budget). Not
    // when it was measured lately, though (then soon after: HeapSampler.sample): back to back
    // runs paid it each, p50 2.3 -> 4.1 ms on quickjs (its measurement walks the heap).
    const fenced = fence(instance, limits.wallTimeMs);
    const measure = !this.heap.fresh(instance);
    this.releaseAfter(instance, measure ? fenced.then(() => this.heap.measure(instance)) : fenced, execution, measure);
    return result;
  }

  /**
   * Call an export. With an idle instance, a short call waits for the end of the tick and
   * crosses with the calls made in the same tick (gather); a long one crosses at once. When
   * every instance the prefix may use is busy, calls wait in the prefix's queue, and the next
   * free instance takes all waiting calls to the same export with the same limits in ONE
   * crossing (up to MAX_COALESCED calls and MAX_COALESCED_CHARS of arguments): the guest runs
   * them one after another and returns every outcome together. Coalesced calls share the
   * crossing's limits: a limit that fires fails all of them. Decisions 005 and 011.
   */
  call(request: PrefixCallRequest): Promise<RunResult> {
    // Not async on this path (nearly every call under load): an async function returning the
    // queue's promise adds two microtask turns per call.
    if (this.idle.length > 0 && this.speeds.gatherable(request.path, request.argsText)) {
      // Wait for the end of this tick: calls made in the same burst (a crossing's answers that
      // each make the next call) cross together instead of the first one alone. A lone call
      // pays the wait: sequential calls p50 ~0.5-1 µs slower in the measurement below.
      // The idle instances take up to MAX_COALESCED calls each then: only calls past that wait.
      if (this.queue.length >= this.maxQueued + this.idle.length * MAX_COALESCED) return Promise.resolve(this.full());
      const result = this.queue.add(request);
      this.gatherSoon();
      return result;
    }
    // Every instance it may use is busy: wait in the queue.
    if (this.idle.length === 0 && this.busy + this.growing >= this.parallelismFor(request.path)) return this.enqueue(request);
    return this.callWithoutGathering(request);
  }

  private enqueue(request: PrefixCallRequest): Promise<RunResult> {
    if (this.queue.length >= this.maxQueued) return Promise.resolve(this.full());
    return this.queue.add(request);
  }

  private async callWithoutGathering(request: PrefixCallRequest): Promise<RunResult> {
    const idle = this.takeIdle();
    if (idle) return (await this.dispatch(idle, true, [request]))[0];
    // An instance warming up for bursts (grow) counts: it takes the queue when ready.
    if (this.busy + this.growing < this.parallelismFor(request.path)) {
      const acquired = await this.acquire(request.signal);
      if ("result" in acquired) return acquired.result;
      return (await this.dispatch(acquired.instance, acquired.warm, [request]))[0];
    }
    return this.enqueue(request);
  }

  private full(): RunResult {
    return queueFull(this.engine, this.request.host, this.queue.length);
  }

  /** One crossing for `requests` (same export, same limits) on an instance this prefix holds. */
  private async dispatch(instance: EngineInstance, warm: boolean, requests: PrefixCallRequest[]): Promise<RunResult[]> {
    const { limits, path } = requests[0];
    const signal = requests.length === 1 ? requests[0].signal : undefined;
    const execution = this.track(
      instance,
      () =>
        new Execution(instance, {
          engine: this.engine,
          limits,
          signal,
          host: this.request.host,
          warm,
          guestFiles: this.guestFiles,
          size: requests.length,
        }),
    );
    const blockForMs = this.mayBlock(path, limits, signal) ? limits.cpuTimeMs : undefined;
    execution.startCpu();
    const caps: RuntimeCaps = [limits.maxOutputBytes, limits.maxLogEntries, limits.maxLogBytes, limits.maxBridgeCallBytes];
    // Warming up an instance for these calls can outlast the sandbox: running.run checks.
    let pending = false;
    let returned = false;
    let crossing: Promise<void> = Promise.resolve();
    const results = await this.running.run(execution, execution.outcomes, () => {
      crossing = instance
        .call(
          path,
          requests.map((r) => r.argsText),
          caps,
          blockForMs,
          limits.wallTimeMs,
        )
        .then(
          (joined: string) => {
            returned = true;
            // An export that returned a promise gets more instances rather than coalesced calls.
            pending = execution.finishAll(joined);
            if (pending) this.speeds.returnedPromise(path);
          },
          (error: unknown) => {
            returned = true;
            execution.taskFailed(error);
          },
        );
    });
    // CPU time, not wall time: right after a prepare, spares being made on this thread put
    // trivial calls at 0.2-3 ms of wall time (their CPU: 0.03-0.4 ms).
    const first = results[0];
    if (first) {
      // A fired limit disposed the instance, so its CPU reads 0: it ran for its limit.
      const limited = !first.ok && LIMIT_CODES.has(first.error.code);
      this.speeds.crossed(path, requests.length, limited ? undefined : first.stats.cpuMs, blockForMs);
    }
    // The instance is free once its crossing has returned, and, when an export returned a
    // promise, once what that left behind (an unawaited chain, its microtasks) has run: a fence
    // follows then, on every engine. The outcome may have been made in a later task (a host
    // call's answer, a timer) still running long after the call's own crossing returned; released
    // then, its logs, host calls and CPU time landed in the next caller's call (a 30-40 ms tail
    // made the next call fail ERR_CPU_TIMEOUT). Until release the tail is held to the call's
    // limits (Execution.drained).
    if (returned && !pending) {
      execution.drained();
      this.release(instance);
    } else {
      this.releaseAfter(
        instance,
        crossing.then(() => (pending ? fence(instance, limits.wallTimeMs) : undefined)),
        execution,
      );
    }
    return results;
  }

  /**
   * Release `instance` once `idle` settles (a fence: past its wall time the instance is tainted,
   * and release discards it). Calls and runs that find no idle instance wait for these first
   * (acquire): an instance about to be free beats warming up another.
   */
  private releaseAfter(instance: EngineInstance, idle: Promise<unknown>, execution: Execution, measured = false): void {
    const fenced = idle.then(() => {
      execution.drained();
      this.release(instance, measured);
    });
    this.fencing.add(fenced);
    void fenced.finally(() => this.fencing.delete(fenced));
  }

  /**
   * At the end of the current tick (after every microtask: process.nextTick), serve the queue
   * with the idle instances. Calls that find no idle instance by then wait for a release, or
   * for a new instance when none is busy (the idle ones were evicted or the pool disposed).
   */
  private gatherSoon(): void {
    if (this.gathering) return;
    this.gathering = true;
    process.nextTick(() => this.gather());
  }

  private gather(): void {
    if (!this.gathering) return;
    this.gathering = false;
    // A burst, and this prefix may use more instances than it has: warm one up for the bursts
    // to come (this one goes to the instances there are). Without it every burst would land on
    // one instance, and the host and that isolate's thread would take turns instead of overlapping.
    const first = this.queue.first as Queued;
    const instances = this.busy + this.growing + this.idle.length;
    if (this.queue.length > 1 && !this.disposed && instances < this.parallelismFor(first.request.path)) void this.grow();
    while (this.queue.length > 0 && this.idle.length > 0) {
      // Shared out over the idle instances: one crossing each, run in parallel.
      const share = Math.ceil(this.queue.length / this.idle.length);
      const instance = this.leaveIdle();
      if (!instance) break;
      this.drain(instance, share);
    }
    this.serveOrphans();
  }

  /** Waiting calls that no busy or warming instance will take: a new instance, or (disposed) a failure. */
  private serveOrphans(): void {
    if (this.queue.length === 0 || this.busy > 0 || this.growing > 0) return;
    if (this.disposed) this.failQueued();
    else void this.replace();
  }

  /** The prefix is disposed and no instance is left to serve the waiting calls. */
  private failQueued(): void {
    const message = this.running.ended
      ? "the sandbox was disposed before this call could run"
      : "the prefix was disposed before this call could run";
    for (const queued of this.queue.takeAll()) {
      queued.resolve(failedResult(this.engine, this.request.host, { code: "ERR_INSTANCE_RESET", name: "CordonError", message }));
    }
  }

  /**
   * May this crossing run synchronously on its engine's thread (process workers, decision 012)?
   * Only a quick export's, within the engine's blocking budget, without an abort signal (a
   * blocked thread could not see the abort), and only while nothing else of this prefix is busy
   * or waiting: under load the engine's own thread runs the guest while the worker's reads and
   * writes frames (v8 events one per call with 64 in flight: 46-49k/s blocking, 50-64k/s not).
   */
  private mayBlock(path: string, limits: ResolvedLimits, signal: AbortSignal | undefined): boolean {
    if (signal !== undefined || this.busy > 1 || this.queue.length > 0) return false;
    return this.speeds.mayBlock(path, limits.cpuTimeMs);
  }

  /** Serve waiting calls with a free instance: the next call and every queued twin of it. */
  private drain(instance: EngineInstance, most = MAX_COALESCED): boolean {
    if (this.queue.length === 0) return false;
    let taken = 1;
    let chars = (this.queue.first as Queued).request.argsText.length;
    const batch = this.queue.take((queued, first) => {
      const twin =
        taken < most &&
        chars + queued.request.argsText.length <= MAX_COALESCED_CHARS &&
        queued.request.path === first.request.path &&
        sameLimits(queued.request.limits, first.request.limits) &&
        queued.request.signal === undefined &&
        first.request.signal === undefined;
      if (twin) {
        taken++;
        chars += queued.request.argsText.length;
      }
      return twin;
    });
    this.busy++;
    void this.dispatch(
      instance,
      true,
      batch.map((q) => q.request),
    ).then((results) => {
      for (let i = 0; i < batch.length; i++) batch[i].resolve(results[i]);
    });
    return true;
  }

  /** Instances a path may keep busy: few for handlers that return at once (their calls coalesce), more for ones that await. */
  private parallelismFor(path: string): number {
    // maxConcurrentRuns (maxInstances) bounds quick exports too, below one instance per core.
    return this.speeds.awaits(path) ? this.limits.maxInstances : Math.min(this.limits.coalesceAbove, this.limits.maxInstances);
  }

  private takeIdle(): EngineInstance | undefined {
    const instance = this.leaveIdle();
    if (instance) this.busy++;
    return instance;
  }

  /**
   * Idle instances lost while idle (a leftover of a served call ran past its time, a QuickJS
   * thread ended) out of the idle list and the residency budget: else stats counted them idle
   * until a call passed over them.
   */
  private dropLost(): void {
    for (let i = this.idle.length - 1; i >= 0; i--) {
      const instance = this.idle[i];
      if (instance.disposed || instance.tainted) this.removeIdle(i).dispose();
    }
  }

  /** An idle instance out of the idle list and the residency budget (not counted busy yet). */
  private leaveIdle(): EngineInstance | undefined {
    for (let i = this.idle.length - 1; i >= 0; i--) {
      const instance = this.idle[i];
      const lost = instance.disposed || instance.tainted;
      // On a stalled thread (another tenant's stopped guest holds it) it stays idle: a call
      // would wait for that guest, and die with the thread if it is stuck.
      if (!lost && instance.stalled?.()) continue;
      this.removeIdle(i);
      if (!lost) return instance;
      // Lost while idle (a QuickJS thread ended under another tenant's stuck guest): handed
      // out, it failed the call at once and hung a run until its wall time.
      instance.dispose();
    }
    return undefined;
  }

  /** The idle instance at `i`, out of the idle list and the residency budget. */
  private removeIdle(i: number): EngineInstance {
    const [instance] = this.idle.splice(i, 1) as [EngineInstance];
    const resident = this.residents.get(instance);
    if (resident) this.residency.leave(resident);
    this.residents.delete(instance);
    return instance;
  }

  counts(): PrefixCounts {
    this.dropLost();
    return {
      key: this.request.key.slice(0, 16),
      warm: this.idle.length + this.busy,
      idle: this.idle.length,
      busy: this.busy,
      queued: this.queue.length,
    };
  }

  dispose(): void {
    if (this.disposed) return;
    // Calls already made are served: those waiting for the end of this tick cross now.
    if (this.gathering) this.gather();
    this.disposed = true;
    for (const instance of this.idle.splice(0)) this.drop(instance);
    this.onDispose?.();
  }

  /**
   * The sandbox is disposed: unlike dispose() (calls already made are served), waiting calls
   * fail. (The engine ends the runs and calls in progress: `running` is the engine's.)
   */
  end(): void {
    this.gathering = false;
    this.dispose();
    this.failQueued();
  }

  /** Called once when the pool is disposed (the engine stops listing it). */
  onDispose: (() => void) | undefined;

  private async acquire(signal?: AbortSignal): Promise<{ instance: EngineInstance; warm: boolean } | { result: RunResult }> {
    // Counted busy before the first await: call() checks busy against the prefix's cap, and a
    // burst's calls all passed it while the first waited, each then warming its own instance
    // (200 calls, maxConcurrentRuns 1: 200 instances).
    this.busy++;
    // An instance finishing its last run is about to be idle: waiting for it beats a cold start.
    if (this.idle.length === 0 && this.fencing.size > 0) await Promise.race(this.fencing);
    const instance = this.leaveIdle();
    if (instance) return { instance, warm: true };
    const { instance: fresh, result } = await this.warmUp(signal);
    if (!fresh) {
      this.busy--;
      return { result };
    }
    return { instance: fresh, warm: false };
  }

  /**
   * The Execution for a run or crossing on `instance`, counted busy already: when making it
   * throws, the instance goes back (else it stayed busy for good, and calls queued behind it
   * never settled).
   */
  private track(instance: EngineInstance, make: () => Execution): Execution {
    try {
      return make();
    } catch (error) {
      this.release(instance);
      throw error;
    }
  }

  /**
   * Put an instance back: kept warm when untainted and within the residency budget. `measured`:
   * its heap was measured since its last use (else it is measured soon after: HeapSampler.sample).
   */
  private release(instance: EngineInstance, measured = false): void {
    this.busy = Math.max(0, this.busy - 1);
    instance.uses++;
    instance.listener = undefined;
    const wornOut = instance.maxUses !== undefined && instance.uses >= instance.maxUses;
    if (instance.tainted || instance.disposed || wornOut) {
      instance.dispose();
      // Calls waiting for this instance get a fresh one; once the prefix is disposed, only the
      // instances still busy or warming may take them.
      if (this.disposed) this.serveOrphans();
      else if (this.queue.length > 0) void this.replace();
      return;
    }
    instance.lastUsed = performance.now();
    // Calls made before a dispose are still served by the instances that were busy then.
    if (this.drain(instance)) return;
    if (this.disposed) {
      instance.dispose();
      return;
    }
    const resident: Resident = {
      prefixKey: this.request.key,
      heapBytes: () => instance.heapUsedBytes,
      idleSince: () => instance.lastUsed,
      evict: () => {
        const index = this.idle.indexOf(instance);
        if (index >= 0) this.idle.splice(index, 1);
        this.residents.delete(instance);
        instance.dispose();
      },
    };
    if (!this.residency.admit(resident)) {
      instance.dispose();
      return;
    }
    this.residents.set(instance, resident);
    this.idle.push(instance);
    if (!measured) this.heap.sample(instance);
  }

  /** One more warm instance: it serves the queue or waits idle. If it cannot be made, calls only it would have served get another way. */
  private async grow(): Promise<void> {
    this.growing++;
    const { instance } = await this.warmUp();
    this.growing--;
    if (!instance) {
      this.serveOrphans();
      return;
    }
    this.busy++; // release counts it back
    this.release(instance, true);
  }

  /** Warm a new instance for the queue after one was discarded. */
  private async replace(): Promise<void> {
    this.busy++;
    const { instance, result } = await this.warmUp();
    this.busy--;
    if (instance) {
      this.busy++;
      this.release(instance, true);
      return;
    }
    for (const queued of this.queue.takeAll()) queued.resolve(result);
  }

  private drop(instance: EngineInstance): void {
    const resident = this.residents.get(instance);
    if (resident) this.residency.leave(resident);
    this.residents.delete(instance);
    instance.dispose();
  }
}

/** A prefix that fails to evaluate says so, and names the budget when a time limit stopped it. */
function prefixFailure(result: RunResult, limits: ResolvedLimits): RunResult {
  if (result.ok) return result;
  const code = result.error.code;
  if (code === "ERR_CPU_TIMEOUT" || code === "ERR_WALL_TIMEOUT") {
    result.error.message = `the prefix did not finish evaluating within its budget (cpuTimeMs ${limits.cpuTimeMs}, wallTimeMs ${limits.wallTimeMs}): ${result.error.message}`;
  }
  return result;
}
