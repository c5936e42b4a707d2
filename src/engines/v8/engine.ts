import { PooledEngine, type PooledEngineOptions } from "../pooled-engine.js";
import { V8Instance } from "./instance.js";
import { loadIsolatedVm } from "./load.js";

/** The v8 engine: V8 isolates through isolated-vm, in this process. */
export function createV8Engine(options: PooledEngineOptions): PooledEngine {
  loadIsolatedVm();
  return new PooledEngine("v8", (memoryMb) => V8Instance.create(memoryMb), options);
}
