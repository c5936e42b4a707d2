import type { Engine, EngineRunRequest } from "../../core/engine.js";
import type { RunResult } from "../../core/types.js";
import { loadIsolatedVm } from "./load.js";
import { V8Run } from "./run.js";

/** The v8 engine: V8 isolates through isolated-vm, one fresh isolate per one-off run. */
export class V8Engine implements Engine {
  readonly name = "v8" as const;

  constructor() {
    loadIsolatedVm();
  }

  run(request: EngineRunRequest): Promise<RunResult> {
    return new V8Run(request).execute();
  }

  async dispose(): Promise<void> {}
}
