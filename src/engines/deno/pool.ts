import type { DenoInstance } from "./instance.js";

export interface FunctionPoolOptions {
  /** An idle function process is ended after this long. */
  idleTtlMs: number;
  /** A function process is retired after this many runs (every run's module instance stays in Deno's module map). */
  maxInvocations: number;
  /** A soft cap on idle function processes: past it the least recently used idle one ends (a busy one never). */
  softCap: number;
}

interface Slot {
  instance: DenoInstance;
  busy: boolean;
  /** The last run's result is out; the process is finishing what it left queued. */
  settling?: Promise<void>;
}

/**
 * The Deno processes of one-off runs, one per function (the hash of its code, files and limits):
 * two functions never share a process; a run of a function whose process is busy gets an
 * ephemeral one, ended after that run.
 */
export class FunctionPool {
  private readonly slots = new Map<string, Slot>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly options: FunctionPoolOptions) {
    this.sweeper = setInterval(() => this.sweep(), Math.max(100, Math.min(options.idleTtlMs / 4, 5000)));
    this.sweeper.unref();
  }

  get size(): number {
    return this.slots.size;
  }

  get idle(): number {
    let n = 0;
    for (const slot of this.slots.values()) if (!slot.busy) n++;
    return n;
  }

  /**
   * The function's own process when it is idle; "busy" when it is running; a promise when its
   * last run is settling (waiting beats starting another process); undefined when there is none.
   */
  take(key: string): DenoInstance | "busy" | Promise<void> | undefined {
    const slot = this.slots.get(key);
    if (!slot) return undefined;
    if (slot.instance.disposed) {
      this.slots.delete(key);
      return undefined;
    }
    if (slot.settling) return slot.settling;
    if (slot.busy) return "busy";
    slot.busy = true;
    return slot.instance;
  }

  /** A new process becomes the function's own (busy with its first run). False when it already has one. */
  adopt(key: string, instance: DenoInstance): boolean {
    if (this.slots.has(key)) return false;
    instance.functionKey = key;
    this.slots.set(key, { instance, busy: true });
    return true;
  }

  /** The run's result is out; `fence` resolves once the process is idle, then it is released. */
  settle(key: string, instance: DenoInstance, fence: Promise<void>): void {
    const slot = this.slots.get(key);
    const settling = fence.then(() => {
      if (slot) slot.settling = undefined;
      this.release(key, instance);
    });
    if (slot && slot.instance === instance) slot.settling = settling;
  }

  /** The run is over: keep the process for the next run, or retire it. */
  release(key: string, instance: DenoInstance): void {
    const slot = this.slots.get(key);
    if (!slot || slot.instance !== instance) {
      instance.dispose();
      return;
    }
    instance.uses++;
    instance.lastUsed = performance.now();
    if (instance.tainted || instance.disposed || instance.uses >= this.options.maxInvocations) {
      this.slots.delete(key);
      instance.dispose();
      return;
    }
    slot.busy = false;
    this.trim();
  }

  /** Past the soft cap, end idle processes, least recently used first. */
  private trim(): void {
    if (this.slots.size <= this.options.softCap) return;
    const idle = [...this.slots.entries()]
      .filter(([, s]) => !s.busy)
      .sort((a, b) => a[1].instance.lastUsed - b[1].instance.lastUsed);
    for (const [key, slot] of idle) {
      if (this.slots.size <= this.options.softCap) break;
      this.slots.delete(key);
      slot.instance.dispose();
    }
  }

  private sweep(): void {
    const now = performance.now();
    for (const [key, slot] of this.slots) {
      if (slot.instance.disposed) this.slots.delete(key);
      else if (!slot.busy && now - slot.instance.lastUsed > this.options.idleTtlMs) {
        this.slots.delete(key);
        slot.instance.dispose();
      }
    }
  }

  /** Pids of the live processes, for tests and stats. */
  pids(): number[] {
    return [...this.slots.values()].map((s) => s.instance.process.pid);
  }

  dispose(): void {
    clearInterval(this.sweeper);
    for (const slot of this.slots.values()) slot.instance.dispose();
    this.slots.clear();
  }
}
