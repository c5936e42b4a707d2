import type { EnginePrefix, EnginePrepareRequest, PrefixCallRequest, PrefixCounts, PrefixRunRequest } from "../../core/engine.js";
import type { ResolvedLimits } from "../../core/limits.js";
import type { Residency, Resident } from "../../core/residency.js";
import type { RunResult } from "../../core/types.js";
import { Execution } from "./execution.js";
import type { V8Instance } from "./instance.js";
import type { Spares } from "./spares.js";

/** Measure an idle instance's heap every this many uses (an extra round trip, off the hot path). */
const HEAP_SAMPLE_EVERY = 16;

/**
 * The warm pool of one prefix: instances that have evaluated the prefix module, reused for
 * runs and calls. One execution owns an instance at a time; concurrent work gets more instances.
 */
export class V8Prefix implements EnginePrefix {
  private readonly idle: V8Instance[] = [];
  private readonly residents = new Map<V8Instance, Resident>();
  private busy = 0;
  private disposed = false;
  private readonly guestFiles: Set<string>;

  constructor(
    private readonly request: EnginePrepareRequest,
    private readonly spares: Spares,
    private readonly residency: Residency,
  ) {
    this.guestFiles = new Set([request.source.filename, ...Object.keys(request.sourceImports)]);
  }

  /** Create a warm instance: bootstrap, install the prefix's bindings, evaluate the prefix module. */
  async warmUp(signal?: AbortSignal): Promise<{ instance?: V8Instance; result: RunResult }> {
    const { source, sourceImports, bindings, limits, host } = this.request;
    const instance = await this.spares.take(limits.memoryMb);
    const execution = new Execution(instance, { limits, signal, host, warm: false, guestFiles: this.guestFiles });
    try {
      await instance.install(bindings);
      await instance.begin("prepare", '{"$":"u"}', limits.maxOutputBytes, limits.maxLogEntries, limits.maxLogBytes);
      const driver = await instance.link(source, sourceImports);
      execution.startCpu();
      driver.evaluate().catch((error: unknown) => execution.taskFailed(error));
    } catch (error) {
      execution.taskFailed(error);
    }
    const result = await execution.outcome;
    if (!result.ok) {
      instance.dispose();
      return { result: prefixFailure(result, limits) };
    }
    // The residency budget needs the heap of a warm instance before it goes idle.
    await instance.measureHeap();
    return { instance, result };
  }

  adopt(instance: V8Instance): void {
    this.release(instance);
  }

  async run(request: PrefixRunRequest): Promise<RunResult> {
    const acquired = await this.acquire(request.signal);
    if ("result" in acquired) return acquired.result;
    const { instance, warm } = acquired;
    const { limits, signal } = request;
    const guestFiles = new Set([...this.guestFiles, request.source.filename, ...Object.keys(request.sourceImports)]);
    const execution = new Execution(instance, { limits, signal, host: this.request.host, warm, guestFiles });
    try {
      await instance.begin("run", request.inputText, limits.maxOutputBytes, limits.maxLogEntries, limits.maxLogBytes);
      const driver = await instance.link(request.source, request.sourceImports);
      execution.startCpu();
      driver.evaluate().catch((error: unknown) => execution.taskFailed(error));
    } catch (error) {
      execution.taskFailed(error);
    }
    const result = await execution.outcome;
    // The result is out; wait until the isolate is idle before another run may own it.
    void this.fence(instance, limits).then(() => this.release(instance));
    return result;
  }

  async call(request: PrefixCallRequest): Promise<RunResult> {
    const acquired = await this.acquire(request.signal);
    if ("result" in acquired) return acquired.result;
    const { instance, warm } = acquired;
    const { limits, signal } = request;
    const execution = new Execution(instance, { limits, signal, host: this.request.host, warm, guestFiles: this.guestFiles });
    execution.startCpu();
    instance.call(request.path, request.argsText, limits.maxOutputBytes, limits.maxLogEntries, limits.maxLogBytes).then(
      (outcome) => execution.finish(outcome[0], outcome.slice(1)),
      (error: unknown) => execution.taskFailed(error),
    );
    const result = await execution.outcome;
    // A call's crossing returns only once the isolate's task is over: it is idle now.
    this.release(instance);
    return result;
  }

  counts(): PrefixCounts {
    return { key: this.request.key.slice(0, 16), warm: this.idle.length + this.busy, idle: this.idle.length, busy: this.busy };
  }

  dispose(): void {
    this.disposed = true;
    for (const instance of this.idle.splice(0)) this.drop(instance);
  }

  private async acquire(signal?: AbortSignal): Promise<{ instance: V8Instance; warm: boolean } | { result: RunResult }> {
    this.busy++;
    const instance = this.idle.pop();
    if (instance) {
      const resident = this.residents.get(instance);
      if (resident) this.residency.leave(resident);
      this.residents.delete(instance);
      return { instance, warm: true };
    }
    const { instance: fresh, result } = await this.warmUp(signal);
    if (!fresh) {
      this.busy--;
      return { result };
    }
    return { instance: fresh, warm: false };
  }

  /** Put an instance back: kept warm when untainted and within the residency budget. */
  private release(instance: V8Instance): void {
    this.busy = Math.max(0, this.busy - 1);
    instance.uses++;
    instance.listener = undefined;
    if (this.disposed || instance.tainted || instance.disposed) {
      instance.dispose();
      return;
    }
    instance.lastUsed = performance.now();
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
    // Refresh the heap figure now and then, in the background: the instance stays available.
    if (instance.uses % HEAP_SAMPLE_EVERY === 0) void instance.measureHeap().then(() => this.residency.rebalance());
  }

  private drop(instance: V8Instance): void {
    const resident = this.residents.get(instance);
    if (resident) this.residency.leave(resident);
    this.residents.delete(instance);
    instance.dispose();
  }

  /** Wait for the isolate to finish what the guest left running; past the wall time, taint it. */
  private async fence(instance: V8Instance, limits: ResolvedLimits): Promise<void> {
    if (instance.tainted || instance.disposed) return;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), limits.wallTimeMs);
    });
    const outcome = await Promise.race([
      instance.ping().then(
        () => "idle" as const,
        () => "late" as const,
      ),
      timeout,
    ]);
    clearTimeout(timer);
    if (outcome === "late") {
      instance.tainted = true;
      instance.dispose();
    }
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
