/**
 * A QuickJS worker's crossings (worker.ts): entering and leaving the VM with CPU accounting
 * published to the host, pumping jobs, and reporting what the guest threw.
 *
 * SELF-CONTAINED, as worker.ts: evaluated in the worker from `quickjsCrossings.toString()`, so
 * it imports nothing at run time and gets what it shares with the rest of the worker as `ctx`.
 */

// biome-ignore lint/suspicious/noExplicitAny: QuickJS's handles are loaded by path at run time, untyped.
type Any = any;

/** One QuickJS runtime + context of a worker, and what the worker keeps about it. */
export interface Instance {
  id: number;
  /** Set when QuickJS reported a failure after which freeing its runtime is not safe. */
  broken: boolean;
  memory: Any;
  memoryMaxBytes: number;
  /** The current run has reported its outcome (or failure). */
  reported: boolean;
  rt: Any;
  vm: Any;
  fns: Record<string, Any>;
  /**
   * The realm's builtins the worker needs, taken at boot before any guest code: `(0, buffer)` a
   * Uint8Array over it, `(1, text)` the text as JSON (no NUL, which a C string would end at).
   */
  helper: Any;
  /** Seeds Math.random again (seeded-random.ts): a copied instance gets a sequence of its own. */
  reseed: Any;
  /** [stop flag, version of `cpu`]: shared with the host (protocol.ts, CONTROL_BYTES). */
  control: Int32Array;
  /** [CPU counted, when the current crossing entered (shared clock, 0 outside)]: shared with the host. */
  cpu: Float64Array;
  enteredAt: number;
  cpuMs: number;
  /** The message of the module loader's latest refusal (a specifier it does not serve). */
  notFound?: string;
  /** The message of the module loader's latest refusal of a source import that did not compile. */
  uncompiled?: string;
  /** Module-form evaluations so far: the tag of the next one's module names (evaluateModule). */
  evaluations: number;
  /** The current run's output limit (its caps' first): a thrown value past it is not copied out (describeError). */
  maxOutputChars: number;
  /** A module-form evaluation's promise while it is pending: read after each crossing (settleEvaluation). */
  evaluation?: Any;
  /**
   * Timer changes of the current crossing, posted together as it ends (flushTimers): id -> the
   * delay and when it was asked (ms < 0: a cancel of a timer the host has).
   */
  timers: Map<number, [number, number]>;
}

/** What a thrown value says, as the worker reports it (FromWorker "threw"). */
export interface Described {
  name: string;
  message: string;
  stack?: string;
  /** A part of it is longer than the run's output limit: reported as ERR_OUTPUT_TOO_LARGE, as a call's throw is. */
  tooLarge?: boolean;
}

export interface CrossingContext {
  post(message: unknown): void;
  instances: Map<number, Instance>;
  release(handle: Any): void;
}

export function quickjsCrossings({ post, instances, release }: CrossingContext) {
  /**
   * What a thrown or rejected value says. Reading it runs guest code (toJSON, getters, Proxy
   * traps): call it only inside a crossing (inVm, or enter/leave), where that code's CPU counts
   * and the interrupt can stop it. An Error's parts are read one by one, each measured before it
   * is copied out: `vm.dump` of a whole error failed on a cycle (`e.cause = e`) and on a 200 MB
   * message, and the caller got `Uncaught "Error: boom"` or `Uncaught ""`.
   */
  function describeError(inst: Instance, handle: Any): Described {
    const vm = inst.vm;
    const limit = inst.maxOutputChars;
    const lengthOf = (h: Any): number => {
      const length = vm.getProp(h, "length");
      const n = vm.typeof(length) === "number" ? vm.getNumber(length) : 0;
      length.dispose();
      return n;
    };
    try {
      if (vm.typeof(handle) === "object") {
        const parts: Record<string, string | undefined> = {};
        let tooLarge = false;
        for (const key of ["name", "message", "stack"]) {
          const part = vm.getProp(handle, key);
          if (vm.typeof(part) === "string") {
            if (lengthOf(part) > limit) tooLarge = true;
            else parts[key] = vm.getString(part);
          }
          part.dispose();
        }
        if (tooLarge) return { name: "Error", message: "", tooLarge };
        if (parts.name !== undefined || parts.message !== undefined || parts.stack !== undefined) {
          const name = parts.name ?? "Error";
          const message = parts.message ?? "";
          return { name, message, stack: parts.stack === undefined ? undefined : `${name}: ${message}\n${parts.stack}` };
        }
      } else if (vm.typeof(handle) === "string" && lengthOf(handle) > limit) {
        return { name: "Error", message: "", tooLarge: true };
      }
    } catch {
      // A getter that threw, or memory that ran out while reading: described as any value is, below.
    }
    let dumped: Any;
    try {
      dumped = vm.dump(handle);
    } catch {
      dumped = undefined;
    }
    // Any other value is described as a call's thrown value is (core/guest-errors.ts), shortened alike.
    let shown = typeof dumped === "bigint" ? `${dumped}n` : (JSON.stringify(dumped) ?? String(dumped));
    if (shown.length > 2000) shown = `${shown.slice(0, 2000)}…`;
    return { name: "Error", message: `Uncaught ${shown}` };
  }

  /**
   * performance.now() plus this offset is process.hrtime in ms: one monotonic clock for every
   * thread of the process, so the host can compare its own time with `enteredAt`.
   */
  const clockOffset = hrtimeOffset();
  function hrtimeOffset(): number {
    // The first performance.now() of a thread is slow (1.3 ms here): warm it, then keep the
    // closest of a few readings (the later reading of each pair only makes it smaller).
    performance.now();
    let offset = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < 5; i++) {
      const hr = process.hrtime();
      offset = Math.max(offset, hr[0] * 1000 + hr[1] / 1e6 - performance.now());
    }
    return offset;
  }

  /**
   * Crossings publish when they entered, so the host counts a guest's CPU time while it is inside
   * a builtin that never reaches the interrupt handler (a 4 GB Array join) and can stop it at
   * its CPU limit. `control[1]` versions the pair (odd while it changes), so the host never adds
   * a crossing's time twice.
   */
  function publish(inst: Instance, cpuMs: number, enteredAt: number): void {
    Atomics.add(inst.control, 1, 1);
    inst.cpu[0] = cpuMs;
    inst.cpu[1] = enteredAt;
    Atomics.add(inst.control, 1, 1);
  }
  function enter(inst: Instance): void {
    inst.enteredAt = performance.now();
    publish(inst, inst.cpuMs, inst.enteredAt + clockOffset);
  }
  function leave(inst: Instance): void {
    inst.cpuMs += performance.now() - inst.enteredAt;
    inst.enteredAt = 0;
    publish(inst, inst.cpuMs, 0);
  }

  /**
   * Post the crossing's timer changes in one message. One message each (a loop of setTimeout and
   * clearTimeout) kept the host's event loop busy 36% of the guest's CPU time, outside every
   * limit. A delay counts from when the guest asked.
   */
  function flushTimers(inst: Instance): void {
    if (inst.timers.size === 0) return;
    const now = performance.now();
    // In the order they fall due (cancels first): a crossing longer than their delays leaves
    // several at 0, and the host starts equal delays in the order it is given them (a 40 ms timer
    // set before a 10 ms one fired first after a 30 ms spin under load).
    const changes: [number, number, number][] = [];
    for (const [timer, [delay, at]] of inst.timers) {
      changes.push(delay < 0 ? [timer, delay, -1] : [timer, Math.max(0, delay - (now - at)), at + delay]);
    }
    changes.sort((x, y) => x[2] - y[2]);
    const list: number[] = [];
    for (const [timer, delay] of changes) list.push(timer, delay);
    inst.timers.clear();
    post({ t: "timers", id: inst.id, list });
  }

  /** Run a VM operation with CPU accounting and job pumping; report what it threw. */
  function inVm<T>(inst: Instance, work: () => T): T | undefined {
    enter(inst);
    try {
      const result = work();
      pump(inst);
      if (inst.evaluation) settleEvaluation(inst);
      // Out of memory, QuickJS can drop the runtime's own promise reactions: a run that is idle,
      // without an outcome, in an exhausted memory will never report one. Say why.
      if (!inst.reported && instances.has(inst.id) && !inst.rt.hasPendingJob() && exhausted(inst)) {
        threw(inst, { name: "InternalError", message: "out of memory" });
      }
      return result;
    } catch (error) {
      fatal(inst, error);
      return undefined;
    } finally {
      if (inst.enteredAt) leave(inst);
      flushTimers(inst);
    }
  }

  function pump(inst: Instance): void {
    for (let round = 0; round < 1_000_000; round++) {
      if (!instances.has(inst.id)) return;
      const jobs = inst.rt.executePendingJobs(-1);
      if (jobs.error) {
        const error = describeError(inst, jobs.error);
        release(jobs.error);
        threw(inst, error);
        return;
      }
      if (jobs.value === 0 || !inst.rt.hasPendingJob()) return;
    }
  }

  /**
   * A module-form evaluation settles as jobs run (top-level await): a rejection is what the
   * module threw. Read from the promise's state inside the crossing, never from a host promise
   * callback: describing the value runs guest code, which must count as CPU and be stoppable.
   */
  function settleEvaluation(inst: Instance): void {
    const promise = inst.evaluation;
    const state = inst.vm.getPromiseState(promise);
    if (state.type === "pending") return;
    inst.evaluation = undefined;
    if (state.type === "rejected") {
      const error = describeError(inst, state.error);
      release(state.error);
      threw(inst, error);
    } else if (state.value !== promise) release(state.value);
    release(promise);
  }

  /**
   * Is QuickJS out of memory now? Asked of the capped linear memory, not of QuickJS: a runtime at
   * its limit cannot allocate the objects its own memory report needs (and this build's malloc
   * counts no sizes). Grown to its cap is not enough: linear memory never shrinks, so after a
   * guest caught an allocation failure and dropped what it held, every later bare throw, and
   * every wait for a timer, was reported as out of memory, for the instance's life (a prefix's
   * later calls too). So the allocator is asked for EXHAUSTED_PROBE_BYTES, given back at once.
   */
  function exhausted(inst: Instance): boolean {
    // Free memory that tells a guest that recovered from an allocation failure from one at its limit.
    const EXHAUSTED_PROBE_BYTES = 1024 * 1024;
    if (!atCap(inst)) return false;
    const module = inst.vm?.module as { _malloc(n: number): number; _free(p: number): void } | undefined;
    if (!module) return true;
    // The worker's _malloc throws where the allocator gives 0 (worker-instances.ts, newModule).
    let probe = 0;
    try {
      probe = module._malloc(EXHAUSTED_PROBE_BYTES);
    } catch {
      return true;
    }
    if (probe === 0) return true;
    module._free(probe);
    return false;
  }

  /** Has the linear memory grown to its cap (at some time: it never shrinks)? */
  function atCap(inst: Instance): boolean {
    return inst.memory.buffer.byteLength >= inst.memoryMaxBytes - 4 * 1024 * 1024;
  }

  /**
   * Is `text` what QuickJS throws when it cannot allocate even the error for running out of
   * memory: null, or a value the runtime cannot read? `text` is a thrown error's message (a
   * crossing's failure), or the codec text of a thrown outcome holding it (the runtime's report;
   * undefined or "null" when it has nothing to report). A guest's own throw of anything else (a
   * string after it caught an allocation failure and let go of what it held) stays its own,
   * whatever the memory's size; only its own `throw null` at the cap reads as out of memory.
   */
  function bareOutOfMemory(text: string | undefined, inst: Instance): boolean {
    if (text === undefined || text === "null") return atCap(inst);
    // What `normalize` throws when it cannot allocate: a value of no JavaScript type (typeof
    // "unknown"), which no guest code can make, whatever the memory's size.
    if (text.includes("[not serializable: a unknown]")) return true;
    const bare =
      /^Uncaught (?:null|undefined)$|"m":"Uncaught (?:null|undefined)"/.test(text) ||
      text.includes("the thrown value could not be read");
    return bare && atCap(inst);
  }

  /**
   * `phase`: "link", the failure of evaluating a module's text, where its static imports are
   * loaded; "compile", of evaluating a script form, which only makes its function.
   */
  function threw(inst: Instance, error: Described, phase?: "link" | "compile"): void {
    if (error.tooLarge) {
      // What the guest runtime reports for a call's throw past the limit (runtime.ts, thrownOutcome).
      const message = `the error the guest threw is larger than the limit of ${inst.maxOutputChars} bytes`;
      inst.reported = true;
      post({ t: "done", id: inst.id, kind: "f", text: JSON.stringify({ code: "ERR_OUTPUT_TOO_LARGE", message }), index: 0 });
      return;
    }
    // At its limit QuickJS may throw a bare value instead of an error: tell that apart from a
    // guest's own `throw null` by asking how much memory is in use.
    if (bareOutOfMemory(error.message, inst)) error = { name: "InternalError", message: "out of memory" };
    if (error.message === "out of memory" || error.message === "interrupted" || error.message === "stack overflow")
      inst.broken = true;
    inst.reported = true;
    // Only the loader's own refusal of a static import is a missing module: a guest may catch a
    // refused import() and throw the same message later (its own error, ERR_USER_CODE).
    const notFound = phase === "link" && inst.notFound !== undefined && error.message === inst.notFound;
    // What the engine would not parse, though esbuild did (decorators, a regexp's duplicate group
    // names), and a static import esbuild would not compile (evaluateModule).
    const unparsed =
      (phase === "compile" && error.name === "SyntaxError") ||
      (phase === "link" && inst.uncompiled !== undefined && error.message === inst.uncompiled);
    post({ t: "threw", id: inst.id, error, interrupted: Atomics.load(inst.control, 0) !== 0, notFound, unparsed });
  }

  /** A failure outside the VM's own error handling: this instance's WASM instance is unusable. */
  function fatal(inst: Instance, error: unknown): void {
    inst.broken = true;
    post({
      t: "threw",
      id: inst.id,
      error: { name: "InternalError", message: `out of memory or the engine failed: ${(error as Error)?.message ?? error}` },
      fatal: true,
    });
  }

  /** Call a runtime internal with text and number arguments, after `leading` (a handle the caller owns) when given. */
  function callInternal(inst: Instance, name: string, args: unknown[], leading?: Any): Any {
    const vm = inst.vm;
    const handles = args.map((a) =>
      a === null ? vm.null : a === undefined ? vm.undefined : typeof a === "number" ? vm.newNumber(a) : vm.newString(String(a)),
    );
    try {
      const result = vm.callFunction(inst.fns[name], vm.undefined, ...(leading ? [leading, ...handles] : handles));
      if (result.error) {
        const error = describeError(inst, result.error);
        release(result.error);
        threw(inst, error);
        return undefined;
      }
      const value = vm.typeof(result.value) === "string" ? vm.getString(result.value) : undefined;
      result.value.dispose();
      return value;
    } finally {
      for (const h of handles) if (h !== vm.undefined && h !== vm.null) h.dispose();
    }
  }

  return { describeError, publish, enter, leave, inVm, pump, bareOutOfMemory, threw, callInternal };
}
