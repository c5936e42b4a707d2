import { createHash } from "node:crypto";
import { LIMIT_CODES } from "../core/errors.js";
import { resolveLimits } from "../core/limits.js";
import { msSince } from "../core/milliseconds.js";
import { abortedResult, failedResult } from "../core/results.js";
import type { RunResult, RunStats, SandboxPolicy } from "../core/types.js";
import { type Prefix, PrepareError } from "../prefix.js";
import type { Sandbox } from "../sandbox.js";
import type { RunRequest } from "./schema.js";
import { onAbort } from "../core/abort-listeners.js";

interface Entry {
  prefix: Promise<Prefix>;
  /** False once the default export turned out not to be a function: such a module runs with `sandbox.run`. */
  callable: boolean;
  /** Requests using the prefix now: a retired prefix is disposed when the last one ends. */
  users: number;
  /** Evicted: its warm instances are of no further use. */
  retired: boolean;
  /** The prefix promise has settled (prepared or failed). */
  settled: boolean;
  /** Requests waiting for the preparation now. */
  waiting: number;
  /** Aborts the preparation's `prepare` once no request waits for it (see leave). */
  wanted: AbortController;
}

/**
 * Warm reuse for the service: a module is prepared once (`sandbox.prepare`) and its default
 * export called for each request (`prefix.call`), so repeated runs of the same function skip
 * compiling and evaluating it. Prefixes are kept in an LRU keyed by the SHA-256 of everything that
 * shapes the evaluated module: code, filename, imports and memoryMb (the warm instances' heap).
 *
 * What this means for the guest: module state persists between requests, as it does on any
 * warm-instance platform (Workers, Lambda). Requests with different `partitionKey`s never share a
 * warm instance; requests without one (everyone holding the admission secret) share by code.
 *
 * Requests that arrive while a module is being prepared share that preparation, which runs to the
 * first request's limits. Each waits for it no longer than its own wall time, reports its own
 * wall time, and when the shared preparation failed on a limit (the first request's, say 100 ms
 * where its own is 10 s) it prepares once more, to its own limits.
 *
 * A module whose default export is not a function (`ERR_CALL_TARGET_NOT_FOUND`) is remembered as
 * such and runs with `sandbox.run`, whose `value` is then the default export itself. A request
 * with `call` calls the named export (`handlers.onEvent`) on the warm instances instead.
 */
export class WarmRunner {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly sandbox: Sandbox,
    private readonly maxEntries = 256,
    /** The sandbox's ceilings and host: a request waiting for a preparation is bounded by its own wall time. */
    private readonly service: { policy: SandboxPolicy; host: RunStats["host"] } = { policy: {}, host: "process" },
  ) {}

  get size(): number {
    return this.entries.size;
  }

  run(request: RunRequest, signal: AbortSignal): Promise<RunResult> {
    return this.attempt(request, signal, false);
  }

  private async attempt(request: RunRequest, signal: AbortSignal, retried: boolean): Promise<RunResult> {
    const { code, input, call, filename, imports, limits, partitionKey } = request;
    const key = createHash("sha256")
      .update(
        JSON.stringify([
          code,
          filename ?? null,
          imports ? Object.entries(imports).sort() : null,
          limits?.memoryMb ?? null,
          partitionKey ?? null,
        ]),
      )
      .digest("hex");
    let entry = this.entries.get(key);
    const cold = entry === undefined;
    // Another request is preparing the module, to its own limits: this one waits for it.
    const joined = entry !== undefined && !entry.settled;
    const started = performance.now();
    if (entry) {
      // Most recently used last: Map keeps insertion order.
      this.entries.delete(key);
      this.entries.set(key, entry);
    } else {
      const wanted = new AbortController();
      const prefix = this.sandbox.prepare({ code, filename, imports, limits, partitionKey, signal: wanted.signal });
      const created: Entry = { prefix, callable: true, users: 0, retired: false, settled: false, waiting: 0, wanted };
      const settle = () => {
        created.settled = true;
      };
      prefix.then(settle, settle);
      entry = created;
      this.entries.set(key, entry);
      this.evictOverflow();
    }
    entry.users++;
    try {
      let prefix: Prefix;
      try {
        const ready = entry.settled ? await entry.prefix : await this.waitFor(key, entry, request, signal, started, joined);
        if (!("run" in ready)) return ready;
        prefix = ready;
      } catch (error) {
        // A failed prefix is never cached: the next request tries again (a time limit may differ).
        if (this.entries.get(key) === entry) this.entries.delete(key);
        if (!(error instanceof PrepareError)) throw error;
        // Failed on the limits of the request that prepared it: once more, to this one's.
        if (joined && !retried && isLimitFailure(error.result)) return await this.attempt(request, signal, true);
        return error.result;
      }
      let result: RunResult;
      if (call) {
        // A named export: a missing one is the caller's answer, not a module to run instead.
        result = await prefix.call({ export: call.export, args: call.args ?? [], limits, signal });
      } else if (!entry.callable) {
        return await this.sandbox.run({ code, input, filename, imports, limits, signal, partitionKey });
      } else {
        result = await prefix.call({ export: "default", args: [input], limits, signal });
      }
      if (!call && !result.ok && result.error.code === "ERR_CALL_TARGET_NOT_FOUND") {
        // The prefix stays: requests that `call` a named export still use its warm instances.
        entry.callable = false;
        // Its partition's own (a deno function's process is kept for the next run of its code).
        return await this.sandbox.run({ code, input, filename, imports, limits, signal, partitionKey });
      }
      if (result.ok) {
        // As `sandbox.run` reports them: the module's data exports (as evaluated when it was prepared).
        result.exports = prefix.exports;
        result.skippedExports = prefix.skippedExports;
      }
      if (cold || joined) {
        // The request that prepared the module paid for its evaluation, and one that waited for it
        // for the wait: say so.
        result.stats.warm = false;
        result.stats.wallMs = msSince(started);
      }
      return result;
    } finally {
      entry.users--;
      if (entry.retired && entry.users === 0) void disposeEntry(entry);
    }
  }

  /**
   * A preparation still in progress, waited for until this request's client goes and, when
   * another request started it (`joined`), no longer than this request's own wall time: a
   * RunResult when the wait ended first. The last request to leave this way takes the
   * preparation with it (leave).
   */
  private async waitFor(
    key: string,
    entry: Entry,
    request: RunRequest,
    signal: AbortSignal,
    started: number,
    joined: boolean,
  ): Promise<Prefix | RunResult> {
    const engine = this.sandbox.engineName;
    let timer: NodeJS.Timeout | undefined;
    let stopWatching: (() => void) | undefined;
    const ended = new Promise<RunResult>((resolve) => {
      const wallMs = () => performance.now() - started;
      if (joined) {
        const wallTimeMs = resolveLimits(request.limits ?? {}, {}, this.service.policy).wallTimeMs;
        timer = setTimeout(() => {
          const message = `the run exceeded its wall time limit of ${wallTimeMs} ms (waiting for its module to be prepared)`;
          resolve(failedResult(engine, this.service.host, { code: "ERR_WALL_TIMEOUT", name: "CordonError", message }, wallMs()));
        }, wallTimeMs);
      }
      const gone = () => resolve(abortedResult(engine, this.service.host, "the client closed the connection", wallMs()));
      if (signal.aborted) gone();
      else stopWatching = onAbort(signal, gone);
    });
    entry.waiting++;
    try {
      return await Promise.race([entry.prefix, ended]);
    } finally {
      clearTimeout(timer);
      stopWatching?.();
      entry.waiting--;
      // A wait the preparation ended finds it settled (its `settled` handler ran first): nothing to leave.
      this.leave(key, entry);
    }
  }

  /**
   * A request stopped waiting for `entry`'s preparation. When none waits any more, the
   * preparation is abandoned: still queued for a slot, the sandbox drops it; evaluating, it runs
   * on to its limits and is disposed (`/health` counts it meanwhile). Before, every preparation
   * ran with nobody left to want it: clients that sent slow modules and closed their connections
   * at once kept all eight slots busy for minutes (red team, 2026-12-05). The entry goes too, so the
   * next request for the module prepares it afresh (joining the sandbox's evaluation if one is
   * still under way).
   */
  private leave(key: string, entry: Entry): void {
    if (entry.waiting > 0 || entry.settled || entry.wanted.signal.aborted) return;
    if (this.entries.get(key) === entry) this.entries.delete(key);
    entry.wanted.abort(new Error("every request waiting for the module left"));
  }

  /**
   * Dispose every prefix (the sandbox's own dispose ends their instances in any case). A prefix
   * still being prepared (its module compiling, say) is disposed when it is ready: shutdown does
   * not wait for it.
   */
  async dispose(): Promise<void> {
    const entries = [...this.entries.values()];
    this.entries.clear();
    for (const entry of entries) if (!entry.settled) void disposeEntry(entry);
    await Promise.all(entries.filter((entry) => entry.settled).map(disposeEntry));
  }

  private evictOverflow(): void {
    for (const [key, entry] of this.entries) {
      if (this.entries.size <= this.maxEntries) break;
      this.entries.delete(key);
      entry.retired = true;
      if (entry.users === 0) void disposeEntry(entry);
    }
  }
}

/** Idempotent: `prefix.dispose` is. */
async function disposeEntry(entry: Entry): Promise<void> {
  const prefix = await entry.prefix.catch(() => undefined);
  await prefix?.dispose();
}

/**
 * A preparation that failed on a limit a request may set differently (compiling counts against
 * wall time). Not memory: memoryMb is part of the entry's key, so the waiter's is the same. Not an
 * abort: the preparation was dropped because no request waited for it (leave).
 */
function isLimitFailure(result: RunResult & { ok: false }): boolean {
  const { code, name } = result.error;
  if (code === "ERR_MEMORY_LIMIT" || code === "ERR_ABORTED") return false;
  return LIMIT_CODES.has(code) || (code === "ERR_COMPILE" && name === "TimeoutError");
}
