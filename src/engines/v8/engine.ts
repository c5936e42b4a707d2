import { PooledEngine, type PooledEngineOptions } from "../pooled-engine.js";
import { V8Instance } from "./instance.js";
import { loadIsolatedVm } from "./load.js";

/**
 * The v8 engine: V8 isolates through isolated-vm, in this process. `beforeSpare`: what making a
 * spare ahead waits for (a process worker: its answers in progress, hosts/process/after-answers.ts).
 */
export function createV8Engine(options: PooledEngineOptions, beforeSpare?: () => Promise<void>): PooledEngine {
  loadIsolatedVm();
  // Spares made ahead warm up their runtime; an instance a run is waiting for does not (it would
  // pay the same compilation twice over).
  const create = (memoryMb: number, ahead: boolean) =>
    V8Instance.create(memoryMb, { warmUp: ahead, busyPollMs: options.busyPollMs, syncCalls: options.syncCalls });
  return new PooledEngine(
    "v8",
    (memoryMb, ahead) => (ahead && beforeSpare ? beforeSpare().then(() => create(memoryMb, ahead)) : create(memoryMb, ahead)),
    options,
  );
}
