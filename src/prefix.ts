import type { EnginePrefix } from "./core/engine.js";
import { CordonError } from "./core/errors.js";
import type { DefaultExportKind, RunOptions, RunResult } from "./core/types.js";

/** Options of `prefix.run`: a postfix module that sees what the prefix put on `globalThis`. */
export type PrefixRunOptions = Pick<RunOptions, "code" | "input" | "filename" | "limits" | "signal">;

/** Options of `prefix.call`: an exported handler of the prefix, by dotted path. */
export interface PrefixCallOptions {
  /** `"default"`, `"default.fetch"`, `"handleEvent"`, any dotted path; `this` is bound to its owner. */
  export: string;
  /** Crosses once: a batch of events is one argument, one crossing. */
  args?: unknown[];
  limits?: RunOptions["limits"];
  signal?: AbortSignal;
}

/** What the sandbox does for a prefix; the prefix itself only keeps its handle. */
export interface PrefixBackend {
  run(pool: EnginePrefix, options: PrefixRunOptions): Promise<RunResult>;
  call(pool: EnginePrefix, options: PrefixCallOptions): Promise<RunResult>;
  release(key: string): void;
}

/**
 * A prepared prefix: warm instances that evaluated `code` with its globals and imports once.
 * Each handle is disposed on its own; the warm pool goes when its last handle does.
 */
export class Prefix implements AsyncDisposable {
  private disposed = false;

  constructor(
    /** The warm-pool key: prefix hash and partition key. */
    readonly key: string,
    /** The prefix module's serializable exports, as evaluated. */
    readonly exports: Record<string, unknown>,
    readonly skippedExports: string[],
    /** The default export's `typeof` (as readExports says it), undefined when there is none. */
    readonly defaultExport: DefaultExportKind | undefined,
    private readonly pool: EnginePrefix,
    private readonly backend: PrefixBackend,
  ) {}

  async run(options: PrefixRunOptions): Promise<RunResult> {
    this.check();
    return this.backend.run(this.pool, options);
  }

  // Not async: an async function that returns a promise adds two turns of the microtask queue
  // to every call (the warm path's host thread is its bottleneck).
  call(options: PrefixCallOptions): Promise<RunResult> {
    try {
      this.check();
    } catch (error) {
      return Promise.reject(error);
    }
    return this.backend.call(this.pool, options);
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.backend.release(this.key);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  private check(): void {
    if (this.disposed) throw new CordonError("ERR_INSTANCE_RESET", "cordon: this prefix has been disposed");
  }
}

/** Thrown by `prepare` and `readExports` when the module itself fails: `result` says how. */
export class PrepareError extends CordonError {
  /** `what` failed: the prefix (`prepare`) or the module (`readExports`). */
  constructor(
    readonly result: RunResult & { ok: false },
    what: "prefix" | "module" = "prefix",
  ) {
    super(result.error.code, `cordon: the ${what} failed to evaluate: ${result.error.message}`);
    this.name = "PrepareError";
  }
}
