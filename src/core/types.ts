import type { RunError } from "./errors.js";
import type { RpcHandler } from "../hosts/remote/rpc.js";

export type EngineName = "auto" | "v8" | "quickjs" | "deno" | "trusted";
export type HostName = "auto" | "inprocess" | "process" | "remote";

/**
 * A network rule: `"api.example.com"` (exact host), `"*.cdn.io"` (subdomains), `"host:port"`,
 * `"*"` (any host, only where the policy allows it), or a host with routes.
 */
export type NetRule = string | { host: string; port?: number; routes?: { path: string; methods?: string[] }[] };

/** What a run may reach beyond its own realm. Omitted = denied. */
export interface Capabilities {
  /** Hosts the guest's `fetch` may reach, intersected with `policy.net.allow`. No rule, no `fetch`. */
  net?: NetRule[];
  /**
   * Hosts (`"esm.sh"`, `"example.com:8443"`) remote modules may be imported from. The deno engine
   * only (other engines import nothing remote); without it Deno's default import hosts are denied.
   * Narrowed by `policy.net.allow`; loopback and other special address literals and `localhost` are refused.
   */
  import?: string[];
}

/** Host ceilings. Every request is clamped to these; none is ever widened. */
export interface SandboxPolicy {
  maxMemoryMb?: number;
  maxWallTimeMs?: number;
  maxCpuTimeMs?: number;
  net?: {
    /**
     * The deployment's ceiling for `capabilities.net` (and the deno engine's `capabilities.import`):
     * a run's rules are intersected with it; `"*"` lets a run ask for any public host. Default: no
     * ceiling, a run's rules stand as written (any host but `"*"`; special addresses still refused).
     */
    allow?: string[];
    /** Exact origins (`https://api.internal:8443`) exempt from the private-address check: the deployment's own API. */
    internalOrigins?: string[];
    /** Redirects the egress follows, each hop checked again (credentials dropped across origins). Default 0: the guest sees the 3xx. */
    maxRedirects?: number;
    /**
     * The DNS servers the egress asks (fetch, and the deno engine's remote imports), as
     * addresses with an optional port: `["10.0.0.2", "127.0.0.1:5353"]`. Default: the system's.
     * Asked with c-ares; /etc/hosts is not read either way.
     */
    dnsServers?: string[];
  };
}

export interface SandboxOptions {
  engine?: EngineName;
  host?: HostName;
  /** Memory per instance in MB. Default 128, clamped to 8..policy ceiling. */
  memoryMb?: number;
  /** Heap budget (MB) for idle warm instances across all prefixes; eviction by heap used × idle time. */
  memoryBudgetMb?: number;
  /** Instances created ahead of time so one-off runs skip isolate creation. Default 2; 0 disables. */
  spareInstances?: number;
  /** The process host's worker processes. */
  workers?: {
    /** Workers kept even when idle. Default 1. */
    min?: number;
    /** A soft cap: idle workers past it are ended, least recently used first; busy ones never. Default: one per core. */
    max?: number;
    /** An idle worker beyond `min` is ended after this long. Default 60 000. */
    idleTtlMs?: number;
    /** A worker is recycled after this many runs. Default 10 000. */
    maxRunsPerWorker?: number;
    /** A hard cap on one worker's resident size; default: its base + the memory of its runs in flight + its warm heap + rssSlackMb. */
    maxRssMb?: number;
    /** The calibrated allowance for the worker's own heap, code and garbage not yet collected. Default 256. */
    rssSlackMb?: number;
    /**
     * Busy-poll the pipes, on both sides, for this many ms: the sandbox's thread turns until a
     * worker's answer is read, and the worker's loop after answering, for the next request (in a
     * stream of requests only, never while a request is in progress). Default 0: on this 2-core
     * machine it cut a quick warm call's p50 from ~140 to ~40-80 µs but raised its p99 from
     * ~0.3 to ~0.4-0.9 ms (other calls: p99 up to ~2 ms), and it takes a core from whatever else the host does meanwhile; worth
     * it with cores to spare. The engines inside workers never poll (decision 012).
     */
    busyPollMs?: number;
  };
  /** "partition": each partitionKey gets worker processes of its own. Default "shared" (isolates are never shared). */
  isolateProcesses?: "shared" | "partition";
  /** The deno engine's processes of one-off runs (one per function). */
  deno?: {
    /** An idle function process is ended after this long. Default 60 000. */
    idleTtlMs?: number;
    /** A function process is retired after this many runs. Default 1000. */
    maxInvocations?: number;
    /** Function processes kept; past it the least recently used idle one ends (a busy one never). Default 16. */
    softCap?: number;
    /**
     * Deno loads `npm:` packages and remote modules only from its cache (`--cached-only`), so it
     * fetches nothing a guest names. Fill the cache ahead (e.g. `cordon check` without it). Default false.
     */
    cachedOnly?: boolean;
    /**
     * What a function's private directory (its module files, and what it writes there) may hold,
     * in MB; past it the run fails with ERR_MEMORY_LIMIT and the process ends. Default 64. Deno's
     * cache of the function's modules has a bound of its own: 64 MB, or this if larger.
     */
    diskMb?: number;
    /**
     * Where Deno keeps what it downloads (npm packages, remote modules), shared by all functions;
     * each process's own DENO_DIR links to it. Default: `cordon-deno-cache` in the OS temp directory.
     */
    cacheDir?: string;
  };
  /**
   * In-process v8 and quickjs: while one answer from an engine's thread is due in a stream of
   * them, this process's event loop keeps turning (never blocked) for up to this many ms, so the
   * answer is seen at once instead of after a thread's wake-up (~35 µs on a shared VM). Costs CPU
   * for at most that long per request. Default 1; 0 turns it off. The process host's pipes are
   * polled per `workers.busyPollMs`.
   */
  busyPollMs?: number;
  /** Runs executing at once. Default: four per core. */
  maxConcurrentRuns?: number;
  /** Runs waiting for a slot. Default 10 000; past it a run fails at once with ERR_QUEUE_FULL. */
  maxQueuedRuns?: number;
  policy?: SandboxPolicy;
  /** The remote host's executor. Default: CORDON_EXEC_URL and CORDON_EXEC_SECRET. */
  remote?: RemoteOptions;
}

/** Where `host: "remote"` runs guests: an executor service (`cordon serve`). */
export interface RemoteOptions {
  /** The executor's base URL, e.g. `http://127.0.0.1:8787`. */
  url: string;
  /** The executor's admission secret (at least 32 bytes). It never reaches a guest. */
  secret: string;
  /**
   * Where the executor calls back for host functions, host imports and brokered fetch. Default:
   * cordon's own callback server on 127.0.0.1 and a free port, which an executor on this machine
   * reaches. Elsewhere: `host`/`port` to listen on and the `url` the executor reaches it by; or
   * mount `createRpcHandler(...).handle` in your own app and pass it as `rpc` with its `url`.
   */
  callback?: { url?: string; rpc?: RpcHandler; host?: string; port?: number };
}

/** Per-run limits. Omitted fields take the defaults; all are clamped by the policy. */
export interface RunLimits {
  cpuTimeMs?: number;
  wallTimeMs?: number;
  memoryMb?: number;
  maxBridgeCalls?: number;
  maxBridgeCallBytes?: number;
  maxOutputBytes?: number;
  maxLogBytes?: number;
  maxLogEntries?: number;
}

/** An async host function the guest may call. Arguments and result cross as data. */
// biome-ignore lint/suspicious/noExplicitAny: host functions take whatever data the guest sends.
export type HostFunction = (...args: any[]) => unknown;

/** A host binding: a function, data, or an object whose function leaves are bridged. */
export type HostBinding = HostFunction | unknown;

export interface RunOptions {
  /** An ES module (JS or TS), or a function body with a top-level `return`. */
  code: string;
  /** Passed to a default-exported function. */
  input?: unknown;
  /**
   * Call this export instead of the default with `input`: a dotted path (`"default.fetch"`,
   * `"handlers.onEvent"`, `this` bound to its owner) and its arguments (a `Request` crosses as
   * one). The value is the call's awaited result; a path that is not a function is
   * ERR_CALL_TARGET_NOT_FOUND.
   */
  call?: { export: string; args?: unknown[] };
  /** The name of the module in stack traces. Default `<guest>`. */
  filename?: string;
  globals?: Record<string, HostBinding>;
  /** Specifier → module source text, or a host module object whose function leaves are bridged. */
  imports?: Record<string, string | Record<string, HostBinding>>;
  limits?: RunLimits;
  capabilities?: Capabilities;
  signal?: AbortSignal;
  /**
   * More modules of a multi-file source, by relative path (`"lib/util.ts"`), imported from the
   * entry with `./lib/util.ts`. The deno engine only; at most 256 files and 20 MB.
   */
  files?: Record<string, string>;
  /**
   * The tenant the run is for. The deno engine keeps a function's process for the next run of the
   * same function: runs with different keys never share one (invariant 4). The other engines run
   * every one-off run in a fresh instance, whatever the key; on the process host with
   * `isolateProcesses: "partition"`, in worker processes of that key's own.
   */
  partitionKey?: string;
}

export type LogLevel = "log" | "info" | "warn" | "error" | "debug";

export interface LogEntry {
  level: LogLevel;
  message: string;
  /** Milliseconds since the run started. */
  atMs: number;
}

export interface RunStats {
  engine: Exclude<EngineName, "auto">;
  host: Exclude<HostName, "auto">;
  wallMs: number;
  cpuMs: number;
  heapUsedBytes?: number;
  bridgeCalls: number;
  warm: boolean;
  /** True when logs were cut at maxLogBytes / maxLogEntries. */
  logsTruncated?: boolean;
}

export interface CompletedResult {
  status: "completed";
  ok: true;
  value: unknown;
  exports: Record<string, unknown>;
  skippedExports: string[];
  logs: LogEntry[];
  stats: RunStats;
}

export interface FailedResult {
  status: "failed";
  ok: false;
  error: RunError;
  logs: LogEntry[];
  stats: RunStats;
}

export interface AbortedResult {
  status: "aborted";
  ok: false;
  reason: string;
  error: RunError & { code: "ERR_ABORTED" };
  logs: LogEntry[];
  stats: RunStats;
}

export type RunResult = CompletedResult | FailedResult | AbortedResult;

/** Options of `sandbox.prepare`: the prefix of the prefix/postfix pattern. */
export interface PrepareOptions {
  code: string;
  filename?: string;
  globals?: Record<string, HostBinding>;
  imports?: RunOptions["imports"];
  /** The prefix evaluation's own budget; `memoryMb` is every warm instance's heap limit. */
  limits?: RunLimits;
  /** Instances are never shared between different partition keys (tenants). */
  partitionKey?: string;
  /** The prefix's capabilities: every run and call on it has them. */
  capabilities?: Capabilities;
  /** A multi-file source's other modules (the deno engine only; see RunOptions.files). */
  files?: Record<string, string>;
  /**
   * Ends this caller's wait: `prepare` rejects with a PrepareError (ERR_ABORTED). An evaluation
   * still waiting for a run slot is dropped once every caller waiting for it has aborted; one
   * already evaluating runs to its own limits.
   */
  signal?: AbortSignal;
}

export interface ReadExportsResult {
  exports: Record<string, unknown>;
  skippedExports: string[];
  /**
   * `typeof` the module's default export ("function" for a handler, "object" for `{ fetch }`),
   * undefined when it has none. Read, never encoded or called: `exports` does not hold it.
   */
  defaultExport?: DefaultExportKind;
}

/** What `typeof` answers: a default export's kind from a guest's realm is one of them or nothing. */
export const DEFAULT_EXPORT_KINDS = [
  "function",
  "object",
  "string",
  "number",
  "bigint",
  "boolean",
  "symbol",
  "undefined",
] as const;

/** What `typeof` says of a module's default export. */
export type DefaultExportKind = (typeof DEFAULT_EXPORT_KINDS)[number];

export interface PrefixStats {
  /** The first 16 hex digits of the prefix key. */
  key: string;
  warm: number;
  idle: number;
  busy: number;
  /**
   * Calls waiting for a free instance (they cross together when one frees), or on the process
   * and remote hosts for the prefix to be prepared again.
   */
  queued: number;
}

export interface SandboxStats {
  activeRuns: number;
  queueDepth: number;
  completedRuns: number;
  /** Instances holding an evaluated prefix, idle or busy. */
  warmInstances: number;
  idleInstances: number;
  idleHeapBytes: number;
  budgetBytes: number;
  spareInstances: number;
  rssBytes: number;
  prefixes: PrefixStats[];
  /** The process host's workers, or the deno engine's Deno processes (partition "function:<key>" or "" for spares and prefixes); absent otherwise. A worker still starting is not listed yet. */
  workers?: { pid: number; partition: string; busy: number; runs: number; rssBytes: number }[];
}
