import { PooledEngine, type PooledEngineOptions } from "../pooled-engine.js";
import { QuickJSInstance } from "./instance.js";
import { QuickJSThreads } from "./threads.js";

/** The quickjs engine: QuickJS compiled to WebAssembly, in worker threads of this process. */
export function createQuickJSEngine(options: PooledEngineOptions): PooledEngine {
  const threads = new QuickJSThreads(options.busyPollMs);
  return new PooledEngine(
    "quickjs",
    (memoryMb, ahead) => QuickJSInstance.create(memoryMb, threads, ahead),
    options,
    () => threads.dispose(),
  );
}
