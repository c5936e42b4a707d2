import type { Engine, EnginePrepareRequest, EngineRunRequest, EngineStats } from "../../core/engine.js";
import { Residency } from "../../core/residency.js";
import type { RunResult } from "../../core/types.js";
import { Execution } from "./execution.js";
import { loadIsolatedVm } from "./load.js";
import { V8Prefix } from "./prefix.js";
import { Spares } from "./spares.js";

export interface V8EngineOptions {
  /** Memory of spare instances: the sandbox's default, so one-off runs usually find a spare. */
  memoryMb: number;
  spares: number;
  budgetBytes: number;
  /** Instances per prefix busy with calls that return at once, before calls coalesce. */
  coalesceAbove: number;
  /** Instances per prefix busy with calls that await. */
  maxInstances: number;
  maxQueued: number;
}

/** The v8 engine: V8 isolates through isolated-vm. One fresh isolate per one-off run; warm pools per prefix. */
export class V8Engine implements Engine {
  readonly name = "v8" as const;
  private readonly spares: Spares;
  private readonly residency: Residency;
  private readonly prefixes = new Set<V8Prefix>();

  constructor(private readonly options: V8EngineOptions) {
    loadIsolatedVm();
    this.spares = new Spares(options.spares, options.memoryMb);
    this.residency = new Residency(options.budgetBytes);
  }

  async run(request: EngineRunRequest): Promise<RunResult> {
    const { limits, signal, host } = request;
    const guestFiles = new Set([request.source.filename, ...Object.keys(request.sourceImports)]);
    const instance = await this.spares.take(limits.memoryMb);
    const execution = new Execution(instance, { limits, signal, host, warm: false, guestFiles });
    try {
      const caps: [number, number, number] = [limits.maxOutputBytes, limits.maxLogEntries, limits.maxLogBytes];
      const { source } = request;
      if (source.script) {
        // No imports, no top-level await: the whole run crosses once.
        execution.startCpu();
        await instance.runScript(request.bindings, request.mode ?? "run", request.inputText, caps, {
          ...source,
          script: source.script,
        });
      } else {
        await instance.start(request.bindings, request.mode ?? "run", request.inputText, caps);
        const driver = await instance.link(source, request.sourceImports);
        execution.startCpu();
        driver.evaluate().catch((error: unknown) => execution.taskFailed(error));
      }
    } catch (error) {
      execution.taskFailed(error);
    }
    const result = await execution.outcome;
    // One-off runs never share an isolate: this one is done.
    instance.dispose();
    return result;
  }

  async prepare(request: EnginePrepareRequest): Promise<{ prefix: V8Prefix; result: RunResult }> {
    const { coalesceAbove, maxInstances, maxQueued } = this.options;
    const prefix = new V8Prefix(request, this.spares, this.residency, { coalesceAbove, maxInstances }, maxQueued);
    const { instance, result } = await prefix.warmUp();
    if (instance) {
      prefix.adopt(instance);
      this.prefixes.add(prefix);
    }
    return { prefix, result };
  }

  forget(prefix: V8Prefix): void {
    prefix.dispose();
    this.prefixes.delete(prefix);
  }

  stats(): EngineStats {
    const prefixes = [...this.prefixes].map((p) => p.counts());
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
    for (const prefix of this.prefixes) prefix.dispose();
    this.prefixes.clear();
    this.spares.dispose();
  }
}
