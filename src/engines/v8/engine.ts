import { PooledEngine, type PooledEngineOptions } from "../pooled-engine.js";
import { V8Instance } from "./instance.js";
import { loadIsolatedVm } from "./load.js";

/** The v8 engine: V8 isolates through isolated-vm, in this process. */
export function createV8Engine(options: PooledEngineOptions): PooledEngine {
  loadIsolatedVm();
  // Spares made ahead warm up their runtime; an instance a run is waiting for does not (it would
  // pay the same compilation twice over).
  return new PooledEngine(
    "v8",
    (memoryMb, ahead) =>
      V8Instance.create(memoryMb, { warmUp: ahead, busyPollMs: options.busyPollMs, syncCalls: options.syncCalls }),
    options,
  );
}
