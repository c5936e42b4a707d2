import type { BindingsLike } from "./bindings.js";
import type { ResolvedLimits } from "./limits.js";
import type { GuestSource } from "./source.js";
import type { EngineName, HostName, RunResult } from "./types.js";

/** One run, as an engine receives it: everything checked, normalized and encoded. */
/**
 * What a fresh instance does with the module: "run" calls the default export with the input;
 * "prepare" evaluates it and reports its exports without calling anything; "call" calls the
 * export path and arguments the input holds (encoded `[path, args]`), as `prefix.call` does.
 */
export type RunMode = "run" | "prepare" | "call";

export interface EngineRunRequest {
  source: GuestSource;
  /** Source-text imports, by specifier (normalized lazily, when the guest imports them). */
  sourceImports: Record<string, string>;
  bindings: BindingsLike;
  /** The input, already encoded by the codec. */
  inputText: string;
  limits: ResolvedLimits;
  /**
   * The limits the caller asked for, when `limits` is less by the time the module's compile took:
   * what the deno engine keys a function's process by (keyed by `limits`, a run after a compile
   * and one of a cached module were two functions).
   */
  callerLimits?: ResolvedLimits;
  signal?: AbortSignal;
  /** Written into RunResult.stats.host. */
  host: Exclude<HostName, "auto">;
  mode?: RunMode;
  /** `capabilities.import`: hosts remote modules may be imported from (the deno engine only). */
  importHosts?: readonly string[];
  /** The caller's partition key ("" when none): the deno engine reuses a process only within one. */
  partitionKey?: string;
}

/** A prefix as the engine keeps it: warm instances that have evaluated the same module. */
export interface EnginePrepareRequest {
  /** Prefix hash and partition key: instances are never shared across keys. */
  key: string;
  /** The caller's partition key ("" when none): the process host may give each its own workers. */
  partitionKey?: string;
  source: GuestSource;
  sourceImports: Record<string, string>;
  bindings: BindingsLike;
  /** The budget of the prefix's own evaluation; `memoryMb` is every warm instance's heap limit. */
  limits: ResolvedLimits;
  host: Exclude<HostName, "auto">;
  /** `capabilities.import` (the deno engine only). */
  importHosts?: readonly string[];
}

export interface PrefixRunRequest {
  source: GuestSource;
  sourceImports: Record<string, string>;
  inputText: string;
  limits: ResolvedLimits;
  signal?: AbortSignal;
}

export interface PrefixCallRequest {
  path: string;
  argsText: string;
  limits: ResolvedLimits;
  signal?: AbortSignal;
}

export interface PrefixCounts {
  key: string;
  warm: number;
  idle: number;
  busy: number;
  /** Calls waiting for a free instance (they cross together when one frees). */
  queued: number;
}

export interface EnginePrefix {
  run(request: PrefixRunRequest): Promise<RunResult>;
  call(request: PrefixCallRequest): Promise<RunResult>;
  counts(): PrefixCounts;
  dispose(): void;
}

export interface EngineStats {
  warmInstances: number;
  idleInstances: number;
  idleHeapBytes: number;
  budgetBytes: number;
  spareInstances: number;
  prefixes: PrefixCounts[];
}

/** HOW JavaScript runs. Every engine passes the same contract (test/conformance). */
export interface Engine {
  readonly name: Exclude<EngineName, "auto">;
  run(request: EngineRunRequest): Promise<RunResult>;
  /**
   * A one-off run is about to be prepared (options checked, source normalized): an engine whose
   * instances live on other threads may wake the one that will serve it, so its wake-up overlaps
   * that work instead of following it.
   */
  expectRun?(): void;
  /** Evaluate a prefix once; resolves with the warm pool and the evaluation's result. */
  prepare(request: EnginePrepareRequest): Promise<{ prefix: EnginePrefix; result: RunResult }>;
  stats(): EngineStats;
  dispose(): Promise<void>;
}
