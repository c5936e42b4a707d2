import { sharedCodec } from "./core/bindings.js";
import { ENCODED_UNDEFINED } from "./core/codec.js";
import { signalAborted, signalReason } from "./core/abort-reason.js";
import { readArgumentBodies } from "./core/body-reads.js";
import { CordonError, type RunError } from "./core/errors.js";
import { compileBound, compileFailureName } from "./core/esbuild-calls.js";
import type { ResolvedLimits } from "./core/limits.js";
import { roundToUs } from "./core/milliseconds.js";
import { abortedResult, failedResult } from "./core/results.js";
import { type GuestSource, cachedSource, normalizeSource } from "./core/source.js";
import type { AbortedResult, EngineName, HostName, RunResult } from "./core/types.js";

/** A run's options as the sandbox checked them. */
export interface CheckedRun {
  code: string;
  filename: string;
  signal: AbortSignal | undefined;
  limits: ResolvedLimits;
}

/** A run's module and input, ready for the engine, or the result it ends with (a compile error, bad input). */
export type SourceAndInput = { source: GuestSource; inputText: string } | { result: RunResult };

/**
 * A sandbox's steps before its engine, shared by one-off runs, prefix runs, calls and prepares:
 * bodies read and input encoded, the module compiled (or found compiled), what the compile took
 * out of the wall time, and the result of work that ends before the engine (aborted, refused,
 * a compile error), named for this sandbox's engine and host.
 */
export class RunStart {
  constructor(
    private readonly engine: Exclude<EngineName, "auto">,
    private readonly host: Exclude<HostName, "auto">,
    /** Aborted when the sandbox is disposed: ends the compiles still running. */
    private readonly lifetime: AbortSignal,
  ) {}

  /**
   * Read the Request and Response bodies among `values` (readArgumentBodies), before a run slot
   * is taken: a slow upload holds none. A failed read is the run's result.
   */
  async readBodiesFirst(
    values: unknown[],
    { limits, signal }: { limits: ResolvedLimits; signal: AbortSignal | undefined },
    where?: string,
  ): Promise<RunResult | undefined> {
    const started = performance.now();
    const unread = await readArgumentBodies(values, limits, signal, where);
    return unread && this.failure(started, unread);
  }

  /**
   * Normalize the module and encode the input; a compile error or bad input is a result. Not a
   * promise when the module is cached (most runs): the callers await only a compile, as each
   * await was a few µs of a one-off run's host time.
   */
  sourceAndInput(
    started: number,
    checked: CheckedRun,
    input: unknown,
    inputName = "input",
  ): SourceAndInput | Promise<SourceAndInput> {
    let inputText: string;
    try {
      inputText =
        input === undefined ? ENCODED_UNDEFINED : sharedCodec().encode(input, inputName, Number.POSITIVE_INFINITY, false);
    } catch (error) {
      return {
        result: this.failure(started, { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: (error as Error).message }),
      };
    }
    try {
      const source = cachedSource(checked.code, checked.filename);
      if (source) return { source, inputText };
    } catch (error) {
      return { result: this.compileFailure(started, error, checked.signal) };
    }
    return this.compileSource(started, checked, inputText);
  }

  private async compileSource(
    started: number,
    { code, filename, limits, signal }: CheckedRun,
    inputText: string,
  ): Promise<SourceAndInput> {
    try {
      return {
        source: await normalizeSource(code, filename, compileBound(limits.wallTimeMs, signal, this.lifetime)),
        inputText,
      };
    } catch (error) {
      return { result: this.compileFailure(started, error, signal) };
    }
  }

  /**
   * Run the engine's part of a run that began (left the queue) at `begun`: wallTimeMs runs from
   * there to the result, compile included (a 1.4 s compile and a 1.8 s loop finished "completed"
   * at 3.3 s under a 2 s limit, stats.wallMs 1914). The engine gets what the compile left of the
   * wall time (and no more CPU than that); the result's wallMs counts the compile.
   */
  async afterCompile(
    begun: number,
    limits: ResolvedLimits,
    run: (limits: ResolvedLimits) => Promise<RunResult>,
  ): Promise<RunResult> {
    const compiledMs = performance.now() - begun;
    const left = Math.floor(limits.wallTimeMs - compiledMs);
    const spent = `${Math.round(compiledMs)} ms of it compiling the module`;
    if (left < 1) {
      const message = `the run exceeded its wall time limit of ${limits.wallTimeMs} ms (${spent})`;
      return this.failure(begun, { code: "ERR_WALL_TIMEOUT", name: "CordonError", message });
    }
    // Under a millisecond (a cached module): the limits as given, the same object every time.
    const engineLimits = compiledMs < 1 ? limits : { ...limits, wallTimeMs: left, cpuTimeMs: Math.min(limits.cpuTimeMs, left) };
    const result = await run(engineLimits);
    result.stats.wallMs = roundToUs(result.stats.wallMs + compiledMs);
    if (engineLimits !== limits && !result.ok) {
      // The engine names the limit it was given: the caller's is the one to name, in a wall
      // timeout and in source imports' compile past the wall time (Execution.checkLimits).
      const { error } = result;
      const named =
        error.code === "ERR_WALL_TIMEOUT" ? "wall time limit of" : error.name === "TimeoutError" ? "wall time of" : undefined;
      if (named) error.message = error.message.replace(`${named} ${left} ms`, `${named} ${limits.wallTimeMs} ms (${spent})`);
    }
    return result;
  }

  /** A compile's failure as a result (anything else is rethrown): aborted, as an abort while running is. */
  compileFailure(started: number, error: unknown, signal?: AbortSignal): RunResult {
    if (!(error instanceof CordonError)) throw error;
    if (error.code === "ERR_ABORTED" && signal && signalAborted(signal)) {
      return this.abortedBy(signal, started);
    }
    // A refused import (a specifier with a NUL) is named as the engines name a missing module.
    const name = error.code === "ERR_MODULE_NOT_FOUND" ? "CordonError" : compileFailureName(error);
    return this.failure(started, { code: error.code, name, message: error.message });
  }

  /** A result for work that `signal` aborted before it reached the engine: the caller's reason. */
  abortedBy(signal: AbortSignal, started: number): AbortedResult {
    return abortedResult(this.engine, this.host, signalReason(signal), performance.now() - started);
  }

  /** A result for work that ended before reaching the engine (queue, input, compile). */
  failure(started: number, error: RunError): RunResult & { ok: false } {
    const wallMs = performance.now() - started;
    if (error.code === "ERR_ABORTED") {
      const aborted = abortedResult(this.engine, this.host, error.message, wallMs);
      return { ...aborted, error: { ...error, code: "ERR_ABORTED" } };
    }
    return failedResult(this.engine, this.host, error, wallMs);
  }
}
