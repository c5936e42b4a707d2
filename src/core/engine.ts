import type { Bindings } from "./bindings.js";
import type { ResolvedLimits } from "./limits.js";
import type { GuestSource } from "./source.js";
import type { EngineName, HostName, RunResult } from "./types.js";

/** One run, as an engine receives it: everything checked, normalized and encoded. */
export interface EngineRunRequest {
  source: GuestSource;
  /** Source-text imports, by specifier (normalized lazily, when the guest imports them). */
  sourceImports: Record<string, string>;
  bindings: Bindings;
  /** The input, already encoded by the codec. */
  inputText: string;
  limits: ResolvedLimits;
  signal?: AbortSignal;
  /** Written into RunResult.stats.host. */
  host: Exclude<HostName, "auto">;
}

/** HOW JavaScript runs. Every engine passes the same contract (test/conformance). */
export interface Engine {
  readonly name: Exclude<EngineName, "auto">;
  run(request: EngineRunRequest): Promise<RunResult>;
  dispose(): Promise<void>;
}
