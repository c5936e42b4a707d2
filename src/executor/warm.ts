import { createHash } from "node:crypto";
import type { RunResult } from "../core/types.js";
import { type Prefix, PrepareError } from "../prefix.js";
import type { Sandbox } from "../sandbox.js";
import type { RunRequest } from "./schema.js";

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
 * A module whose default export is not a function (`ERR_CALL_TARGET_NOT_FOUND`) is remembered as
 * such and runs with `sandbox.run`, whose `value` is then the default export itself. A request
 * with `call` calls the named export (`handlers.onEvent`) on the warm instances instead.
 */
export class WarmRunner {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly sandbox: Sandbox,
    private readonly maxEntries = 256,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  async run(request: RunRequest, signal: AbortSignal): Promise<RunResult> {
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
    const started = performance.now();
    if (entry) {
      // Most recently used last: Map keeps insertion order.
      this.entries.delete(key);
      this.entries.set(key, entry);
    } else {
      const prefix = this.sandbox.prepare({ code, filename, imports, limits, partitionKey });
      const created: Entry = { prefix, callable: true, users: 0, retired: false, settled: false };
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
        prefix = await entry.prefix;
      } catch (error) {
        // A failed prefix is never cached: the next request tries again (a time limit may differ).
        if (this.entries.get(key) === entry) this.entries.delete(key);
        if (error instanceof PrepareError) return error.result;
        throw error;
      }
      let result: RunResult;
      if (call) {
        // A named export: a missing one is the caller's answer, not a module to run instead.
        result = await prefix.call({ export: call.export, args: call.args ?? [], limits, signal });
      } else if (!entry.callable) {
        return await this.sandbox.run({ code, input, filename, imports, limits, signal });
      } else {
        result = await prefix.call({ export: "default", args: [input], limits, signal });
      }
      if (!call && !result.ok && result.error.code === "ERR_CALL_TARGET_NOT_FOUND") {
        // The prefix stays: requests that `call` a named export still use its warm instances.
        entry.callable = false;
        return await this.sandbox.run({ code, input, filename, imports, limits, signal });
      }
      if (result.ok) {
        // As `sandbox.run` reports them: the module's data exports (as evaluated when it was prepared).
        result.exports = prefix.exports;
        result.skippedExports = prefix.skippedExports;
      }
      if (cold) {
        // The request that prepared the module paid for its evaluation: say so.
        result.stats.warm = false;
        result.stats.wallMs = Math.round((performance.now() - started) * 1000) / 1000;
      }
      return result;
    } finally {
      entry.users--;
      if (entry.retired && entry.users === 0) void disposeEntry(entry);
    }
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
