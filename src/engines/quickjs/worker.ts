/**
 * The QuickJS worker thread: QuickJS (WASM, the release sync build) runs synchronously on the
 * thread that calls it, so cordon runs it here, never on the host's event loop. A spinning guest
 * blocks only this thread; the host watches it through shared memory and stops it through the
 * interrupt handler.
 *
 * SELF-CONTAINED: started with `new Worker(source, { eval: true })` from
 * `quickjsWorkerMain.toString()`, so the same code runs under the test runner (TypeScript
 * sources) and from dist/. It loads its packages by the absolute paths the host resolved.
 *
 * Every instance is a QuickJS runtime + context with the cordon guest runtime evaluated in it,
 * booted once per thread as a template and copied from its memory after that (decision 013).
 * The worker keeps no host state: timers, bridge calls and limits live on the host (the same
 * Execution class as the v8 engine); this thread only executes and reports.
 *
 * Longer than cordon's other files: being evaluated from its own source, its parts share one
 * closure (the instances, their VM handles, the post function) and cannot be imported from
 * elsewhere; what needs none of that lives beside it (memory-snapshot.ts, seeded-random.ts).
 */
import type { MemoryPages, memorySnapshots } from "./memory-snapshot.js";
import type { ToWorker } from "./protocol.js";

export interface QuickJSWorkerData {
  corePath: string;
  variantPath: string;
  wasmPath: string;
  runtimeScript: string;
  /** `createHostServices.toString()`: URL parsing and random bytes, the same code the v8 engine uses. */
  hostServicesSource: string;
  callbackNames: Record<"log" | "call" | "timer" | "done" | "parseUrl" | "setUrlPart" | "randomBytes", string>;
  /** QuickJS's own stack limit for guest code, in bytes. */
  stackBytes: number;
  /** After a request that came in a stream, the thread's loop turns this long for the next one (core/busy-poll.ts). */
  busyPollMs: number;
  /** The warm-up runs for spares made ahead (engines/warm-up-modules.ts). */
  warmUpModules: string;
  /** `installSeededRandom.toString()`: each instance's Math.random, seeded from the host's CSPRNG. */
  seededRandomSource: string;
  /** `memorySnapshots.toString()`: copies of a booted instance's memory (memory-snapshot.ts). */
  memorySnapshotsSource: string;
}

// biome-ignore lint/suspicious/noExplicitAny: packages are loaded by path at run time, untyped.
export function quickjsWorkerMain(req: (id: string) => any): void {
  // biome-ignore lint/suspicious/noExplicitAny: the worker loads its packages by path at run time.
  type Any = any;
  const { parentPort, workerData } = req("node:worker_threads") as { parentPort: Any; workerData: QuickJSWorkerData };
  const { readFileSync } = req("node:fs");
  const core = req(workerData.corePath);
  const variantModule = req(workerData.variantPath);
  const variant = variantModule.default ?? variantModule;
  const names = workerData.callbackNames;
  /**
   * Every instance gets its own WASM instance of QuickJS (the compiled module is shared), with a
   * linear memory capped at its memory limit plus the runtime's own needs. So the cap is hard:
   * QuickJS's own accounting misses ArrayBuffer data, the capped memory does not. And a failure
   * that leaves QuickJS unusable (out of memory in C, a failed assertion) ends only that instance.
   */
  const Wasm = (globalThis as Any).WebAssembly;
  const wasmModule: Promise<unknown> = Wasm.compile(readFileSync(workerData.wasmPath));
  const PAGE = 65536;
  const BASE_PAGES = 256; // the 16 MB QuickJS starts with: the runtime, its atoms and the guest runtime
  const instances = new Map<number, Instance>();

  interface Instance {
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
    toBytes: Any;
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

  // Returns nothing: host functions return what post returns, and a value (postMessage's true)
  // would reach the guest.
  const post = (message: unknown): void => {
    parentPort.postMessage(message);
  };
  const snapshots = new Function(`return (${workerData.memorySnapshotsSource})()`)() as ReturnType<typeof memorySnapshots>;

  // The host's own services, evaluated from the source the host sent (this thread cannot import).
  const services = new Function(`return (${workerData.hostServicesSource})()`)() as {
    parseUrl(input: unknown, base?: unknown): string;
    setUrlPart(href: unknown, part: unknown, value: unknown): string;
    randomBytes(n: unknown): Uint8Array;
  };

  function release(handle: Any): void {
    try {
      handle?.dispose();
    } catch {}
  }

  interface Described {
    name: string;
    message: string;
    stack?: string;
    /** A part of it is longer than the run's output limit: reported as ERR_OUTPUT_TOO_LARGE, as a call's throw is. */
    tooLarge?: boolean;
  }

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
   * Did QuickJS run out of memory? Asked of the capped linear memory, not of QuickJS: a runtime
   * at its limit cannot allocate the objects its own memory report needs.
   */
  function exhausted(inst: Instance): boolean {
    return inst.memory.buffer.byteLength >= inst.memoryMaxBytes - 4 * 1024 * 1024;
  }

  function threw(inst: Instance, error: Described): void {
    if (error.tooLarge) {
      // What the guest runtime reports for a call's throw past the limit (runtime.ts, thrownOutcome).
      const message = `the error the guest threw is larger than the limit of ${inst.maxOutputChars} bytes`;
      inst.reported = true;
      post({ t: "done", id: inst.id, kind: "f", text: JSON.stringify({ code: "ERR_OUTPUT_TOO_LARGE", message }), index: 0 });
      return;
    }
    // At its limit QuickJS may throw a bare value instead of an error: tell that apart from a
    // guest's own `throw null` by asking how much memory is in use.
    if (error.message.startsWith("Uncaught ") && exhausted(inst)) error = { name: "InternalError", message: "out of memory" };
    if (error.message === "out of memory" || error.message === "interrupted" || error.message === "stack overflow")
      inst.broken = true;
    inst.reported = true;
    // Only the loader's own refusal is a missing module: a guest may throw the same message.
    const notFound = inst.notFound !== undefined && error.message === inst.notFound;
    post({ t: "threw", id: inst.id, error, interrupted: Atomics.load(inst.control, 0) !== 0, notFound });
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

  /** A fresh WebAssembly instance of QuickJS whose memory is capped for `memoryMb`. */
  async function newModule(memoryMb: number): Promise<{ module: Any; memory: Any; maxPages: number }> {
    const maxPages = BASE_PAGES + Math.ceil((memoryMb * 1024 * 1024) / PAGE);
    const memory = new Wasm.Memory({ initial: BASE_PAGES, maximum: maxPages });
    const module = await core.newQuickJSWASMModuleFromVariant(
      core.newVariant(variant, { wasmModule: await wasmModule, wasmMemory: memory }),
    );
    return { module, memory, maxPages };
  }

  function newInstance(
    id: number,
    memoryMb: number,
    controlBuffer: SharedArrayBuffer,
    memory: Any,
    maxPages: number,
    rt: Any,
  ): Instance {
    const control = new Int32Array(controlBuffer, 0, 2);
    const cpu = new Float64Array(controlBuffer, 8, 2);
    rt.setMemoryLimit(memoryMb * 1024 * 1024);
    rt.setMaxStackSize(workerData.stackBytes);
    const inst: Instance = {
      id,
      broken: false,
      reported: false,
      memory,
      memoryMaxBytes: maxPages * PAGE,
      rt,
      vm: undefined,
      fns: {},
      toBytes: undefined,
      reseed: undefined,
      control,
      cpu,
      enteredAt: 0,
      cpuMs: 0,
      evaluations: 0,
      maxOutputChars: 16 * 1024 * 1024,
      timers: new Map(),
    };
    // Called by QuickJS while guest code runs: stop when told to. (The host counts the CPU time
    // from the published entry time.)
    rt.setInterruptHandler(() => Atomics.load(control, 0) !== 0);
    return inst;
  }

  /**
   * The host functions the guest runtime calls, in the order they are registered: a copied
   * instance registers the same functions in the same order, so the ids its memory holds match.
   */
  function hostFunctions(inst: Instance): [string, (...args: Any[]) => Any][] {
    const { id, vm } = inst;
    const str = (h: Any) => (h === undefined ? undefined : vm.getString(h));
    const num = (h: Any) => (h === undefined ? undefined : vm.getNumber(h));
    return [
      [names.log, (level, message, index) => post({ t: "log", id, level: str(level), message: str(message), index: num(index) })],
      [
        names.call,
        (callId, fnId, argsText) => post({ t: "call", id, callId: num(callId), fnId: num(fnId), argsText: str(argsText) }),
      ],
      [
        names.timer,
        (timerId, ms) => {
          const timer = num(timerId) as number;
          const delay = num(ms) as number;
          const queued = inst.timers.get(timer);
          // Cancelled in the crossing that set it: the host never hears of it.
          if (delay < 0 && queued && queued[0] >= 0) inst.timers.delete(timer);
          else inst.timers.set(timer, [delay, performance.now()]);
        },
      ],
      [
        names.done,
        (kind, text, index) => {
          let outcome = str(text);
          // Out of memory, QuickJS may throw a bare null the runtime then reports as thrown, or
          // fail to read the error it threw (the runtime then says so): name it.
          const bare = !outcome?.includes('"$":"e"') || outcome.includes("the thrown value could not be read");
          if (str(kind) === "t" && bare && exhausted(inst)) {
            outcome = '{"$":"e","n":"InternalError","m":"out of memory"}';
            inst.broken = true;
          }
          inst.reported = true;
          post({
            t: "done",
            id,
            kind: str(kind),
            text: outcome,
            index: index === undefined || vm.typeof(index) !== "number" ? undefined : num(index),
          });
        },
      ],
      [
        names.parseUrl,
        (input, base) =>
          vm.newString(
            services.parseUrl(str(input), base === undefined || vm.typeof(base) === "undefined" ? undefined : str(base)),
          ),
      ],
      [names.setUrlPart, (href, part, value) => vm.newString(services.setUrlPart(str(href), str(part), str(value)))],
      [
        names.randomBytes,
        (n) => {
          const buffer = vm.newArrayBuffer(services.randomBytes(num(n)).buffer);
          const bytes = vm.unwrapResult(vm.callFunction(inst.toBytes, vm.undefined, buffer));
          buffer.dispose();
          return bytes;
        },
      ],
    ];
  }

  const INTERNALS = ["begin", "start", "runFactory", "settle", "fire", "call", "warmUp"];

  /** Four 32-bit words from the host's CSPRNG: a Math.random sequence of the instance's own. */
  function freshSeed(): number[] {
    const bytes = services.randomBytes(16);
    return [0, 4, 8, 12].map((i) => (bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24)) >>> 0);
  }

  /** Make an instance the long way: a new context, the host functions, the guest runtime compiled and run. */
  async function boot(id: number, memoryMb: number, controlBuffer: SharedArrayBuffer, warmUp: boolean): Promise<Instance> {
    const { module, memory, maxPages } = await newModule(memoryMb);
    const inst = newInstance(id, memoryMb, controlBuffer, memory, maxPages, module.newRuntime());
    const vm = inst.rt.newContext();
    inst.vm = vm;
    for (const [name, fn] of hostFunctions(inst)) {
      const handle = vm.newFunction(name, fn);
      vm.setProp(vm.global, name, handle);
      handle.dispose();
    }
    inst.toBytes = vm.unwrapResult(vm.evalCode("(buffer) => new Uint8Array(buffer)", "<cordon>"));
    instances.set(id, inst);
    // Before anything else runs in the context: Math.random with a sequence of its own.
    inst.reseed = vm.unwrapResult(
      vm.evalCode(`(${workerData.seededRandomSource})(globalThis, [${freshSeed().join(",")}])`, "<cordon>"),
    );
    enter(inst);
    const result = vm.evalCode(workerData.runtimeScript, "<cordon>");
    leave(inst);
    if (result.error) {
      const error = describeError(inst, result.error);
      release(result.error);
      instances.delete(id);
      throw new Error(`the guest runtime failed to start: ${error.message}`);
    }
    const internals = result.value;
    for (const name of INTERNALS) inst.fns[name] = vm.getProp(internals, name);
    internals.dispose();
    // A spare made ahead runs a few modules as guests write them, with no outcome reported: the
    // pages its first run touches are then mapped already, and QuickJS's atoms and shapes made.
    // Measured, paced one-off p50 (one run per 60 ms): 1.28-1.48 ms without, 1.27-1.30 ms with.
    if (warmUp) {
      enter(inst);
      try {
        callInternal(inst, "warmUp", [workerData.warmUpModules]);
        pump(inst);
      } catch {
        // A warm-up that fails costs only its benefit.
      }
      leave(inst);
      inst.reported = false;
      inst.timers.clear();
    }
    // What the bootstrap cost is not the guest's.
    inst.cpuMs = 0;
    publish(inst, 0, 0);
    return inst;
  }

  interface Template {
    pages: MemoryPages;
    rt: number;
    ctx: number;
    fns: Record<string, number>;
    toBytes: number;
    reseed: number;
  }
  let template: Promise<Template | undefined> | undefined;

  /**
   * Boot one instance (warmed up) as this thread's template and keep its memory's pages, once.
   * Undefined where copying cannot be trusted: instantiating the module twice must give the same
   * memory, and a copy must run. Instances are then booted, as before.
   */
  function templateOnce(): Promise<Template | undefined> {
    template ??= (async () => {
      try {
        const [a, b] = [await newModule(64), await newModule(64)];
        if (!snapshots.same(a.memory.buffer, b.memory.buffer)) return undefined;
        const inst = await boot(-1, 64, new SharedArrayBuffer(24), true);
        instances.delete(-1);
        // The context's own handle on its global object: released, or every copy would hold a
        // reference its runtime can never free.
        inst.vm.global.dispose();
        const pages = snapshots.diff(a.memory.buffer, inst.memory.buffer);
        if (pages.byteLength > BASE_PAGES * PAGE) return undefined;
        const fns: Record<string, number> = {};
        for (const name of INTERNALS) fns[name] = inst.fns[name].value;
        const made: Template = {
          pages,
          rt: inst.rt.rt.value,
          ctx: inst.vm.ctx.value,
          fns,
          toBytes: inst.toBytes.value,
          reseed: inst.reseed.value,
        };
        // A copy must run guest code and draw its own random numbers.
        const [x, y] = [await copy(made, -2, 64, new SharedArrayBuffer(24)), await copy(made, -3, 64, new SharedArrayBuffer(24))];
        const draw = (i: Instance): number => {
          const handle = i.vm.unwrapResult(i.vm.evalCode("typeof __cordon_entry === 'function' ? Math.random() : -1"));
          const drawn = i.vm.getNumber(handle);
          handle.dispose();
          return drawn;
        };
        const [dx, dy] = [draw(x), draw(y)];
        // Dropped whole, as every instance is (the host sets the stop flag before it disposes
        // one; see dispose): QuickJS's own teardown of a copy reports objects it still holds.
        for (const copied of [x, y]) {
          Atomics.store(copied.control, 0, 1);
          dispose(copied);
        }
        return dx >= 0 && dy >= 0 && dx !== dy ? made : undefined;
      } catch {
        return undefined;
      }
    })();
    return template;
  }

  /** An instance copied from the template's memory: ~2 ms here, against ~13 ms to boot one. */
  async function copy(from: Template, id: number, memoryMb: number, controlBuffer: SharedArrayBuffer): Promise<Instance> {
    const { module, memory, maxPages } = await newModule(memoryMb);
    snapshots.apply(from.pages, memory);
    // quickjs-emscripten 0.32's runtime and context objects, wrapped around the template's
    // pointers (its own API makes them only for a new runtime; `contextPointer` is its hook).
    const { ffi, callbacks } = module;
    const lifetime = new core.Lifetime(from.rt, undefined, (pointer: number) => {
      ffi.QTS_FreeRuntime(pointer);
      callbacks.deleteRuntime(pointer);
    });
    const rt = new core.QuickJSRuntime({ module: module.module, ffi, callbacks, rt: lifetime });
    const inst = newInstance(id, memoryMb, controlBuffer, memory, maxPages, rt);
    const vm = rt.newContext({ contextPointer: from.ctx });
    inst.vm = vm;
    for (const [, fn] of hostFunctions(inst)) rt.hostRefs.put(fn);
    for (const name of INTERNALS) inst.fns[name] = vm.memory.heapValueHandle(from.fns[name]);
    inst.toBytes = vm.memory.heapValueHandle(from.toBytes);
    inst.reseed = vm.memory.heapValueHandle(from.reseed);
    const seed = freshSeed().map((n) => vm.newNumber(n));
    vm.unwrapResult(vm.callFunction(inst.reseed, vm.undefined, ...seed)).dispose();
    for (const handle of seed) handle.dispose();
    instances.set(id, inst);
    return inst;
  }

  async function create(id: number, memoryMb: number, controlBuffer: SharedArrayBuffer, warmUp: boolean): Promise<void> {
    const from = await templateOnce();
    if (from) await copy(from, id, memoryMb, controlBuffer);
    else await boot(id, memoryMb, controlBuffer, warmUp);
  }

  function dispose(inst: Instance): void {
    instances.delete(inst.id);
    // After an interrupt or out of memory QuickJS may hold objects it can no longer free (its
    // runtime teardown asserts and aborts): such an instance is dropped whole, memory and all.
    if (inst.broken || Atomics.load(inst.control, 0) !== 0) return;
    try {
      inst.evaluation?.dispose();
      for (const handle of Object.values(inst.fns)) handle.dispose();
      inst.toBytes?.dispose();
      inst.reseed?.dispose();
      inst.vm.dispose();
      inst.rt.dispose();
    } catch {
      // Dropped with its WASM instance: nothing else shares it.
    }
  }

  /**
   * The script form, compiled here under its own filename (so stacks name it), then run in one
   * crossing: install, begin, evaluate, entry (the runtime's runFactory). Each crossing costs
   * tens of microseconds on a cold cache, which is what a paced one-off run meets.
   */
  function evaluateScript(inst: Instance, message: Extract<ToWorker, { t: "evaluate" }>): void {
    const vm = inst.vm;
    const script = message.script as { code: string; filename: string };
    const compiled = vm.evalCode(script.code, script.filename);
    if (compiled.error) {
      threw(inst, describeError(inst, compiled.error));
      release(compiled.error);
      return;
    }
    try {
      callInternal(inst, "runFactory", [message.bindingsText, message.mode, message.inputText, ...message.caps], compiled.value);
    } finally {
      compiled.value.dispose();
    }
  }

  /**
   * QuickJS keeps every module it loaded, by name, for the runtime's life: a prefix's second
   * module-form run under the name of the first ran the first's code (and could import it). Each
   * evaluation's modules are named `<n>\u2063<specifier>` instead; the host takes the tag out
   * of stacks (QuickJSInstance), so frames still read `<guest>:3:13`. The guest can read `n`
   * (import.meta.url, a stack): it counts this instance's evaluations only, never other
   * instances' on the thread (a counter per thread told a tenant how many runs others made).
   */
  function evaluateModule(inst: Instance, message: Extract<ToWorker, { t: "evaluate" }>): void {
    const module = message.module;
    if (!module) return;
    const vm = inst.vm;
    const tag = `${++inst.evaluations}\u2063`;
    const entry = `${tag}${module.filename}`;
    // Specifiers are names, not paths: the normalizer keeps QuickJS from resolving "./x" against
    // the importer, and gives an import the tag of the module importing it.
    inst.rt.setModuleLoader(
      (name: string) => {
        const specifier = name.startsWith(tag) ? name.slice(tag.length) : undefined;
        if (name === entry) return module.code;
        if (specifier !== undefined && Object.hasOwn(module.imports, specifier)) return module.imports[specifier];
        const shown = specifier ?? name.slice(name.indexOf("\u2063") + 1);
        // The message a guest sees (a dynamic import() it catches) is the refusal alone; the
        // host knows it by this instance's `notFound` flag, not by a prefix in the text.
        inst.notFound = module.notFound.replace('"%s"', JSON.stringify(shown));
        return { error: new Error(inst.notFound) };
      },
      (base: string, requested: string) => {
        const at = base.indexOf("\u2063");
        return at > 0 ? `${base.slice(0, at + 1)}${requested}` : requested;
      },
    );
    const result = vm.evalCode(`import * as ns from ${JSON.stringify(entry)};\n__cordon_entry(ns);`, "<cordon>", {
      type: "module",
    });
    if (result.error) {
      const error = describeError(inst, result.error);
      release(result.error);
      threw(inst, error);
      return;
    }
    // Top-level await: the module's promise settles as jobs run (settleEvaluation, after them).
    release(inst.evaluation);
    inst.evaluation = result.value;
  }

  /**
   * Busy-polling, as core/busy-poll.ts does on the host (this file cannot import it): after a
   * request that came within the window of the one before, the loop keeps turning for the
   * window, so the next request is seen at once instead of after a wake-up. Never after a
   * pause: a single request leaves the thread asleep as before.
   */
  let lastRequest = Number.NEGATIVE_INFINITY;
  let pollUntil = 0;
  let polling = false;
  const turn = () => {
    if (performance.now() < pollUntil) setImmediate(turn);
    else polling = false;
  };
  const heardRequest = () => {
    const now = performance.now();
    const inStream = now - lastRequest <= workerData.busyPollMs;
    lastRequest = now;
    if (!inStream) return;
    pollUntil = now + workerData.busyPollMs;
    if (!polling) {
      polling = true;
      setImmediate(turn);
    }
  };

  parentPort.on("message", (message: ToWorker) => {
    // A wake-up call (Engine.expectRun) only had to get this thread running; it is no request.
    if (message.t === "wake") return;
    heardRequest();
    if (message.t === "create") {
      create(message.id, message.memoryMb, message.control, message.warmUp).then(
        () => post({ t: "reply", id: message.id, seq: message.seq }),
        (error: Error) => post({ t: "reply", id: message.id, seq: message.seq, error: error?.message ?? String(error) }),
      );
      return;
    }
    const inst = instances.get(message.id);
    if (!inst) {
      if ("seq" in message) post({ t: "reply", id: message.id, seq: message.seq, error: "the instance is gone" });
      return;
    }
    switch (message.t) {
      case "evaluate": {
        inst.reported = false;
        inst.maxOutputChars = message.caps[0];
        inVm(inst, () => {
          if (message.script) {
            evaluateScript(inst, message);
            return;
          }
          if (message.bindingsText !== null) {
            callInternal(inst, "start", [message.bindingsText, message.mode, message.inputText, ...message.caps]);
          } else {
            callInternal(inst, "begin", [message.mode, message.inputText, ...message.caps]);
          }
          evaluateModule(inst, message);
        });
        return;
      }
      case "call": {
        inst.reported = true; // a call's outcomes come back with its reply
        if (message.caps) inst.maxOutputChars = message.caps[0];
        const value = inVm(inst, () =>
          callInternal(
            inst,
            "call",
            message.caps ? [message.path, message.joined, ...message.caps] : [message.path, message.joined],
          ),
        );
        post({ t: "reply", id: inst.id, seq: message.seq, value });
        return;
      }
      case "settle":
        inVm(inst, () => callInternal(inst, "settle", [message.callId, message.ok ? 1 : 0, message.text]));
        return;
      case "fire":
        inVm(inst, () => callInternal(inst, "fire", [message.timerId]));
        return;
      case "ping":
        post({ t: "reply", id: inst.id, seq: message.seq, value: true });
        return;
      case "heap": {
        let bytes = 0;
        try {
          const usage = inst.rt.computeMemoryUsage();
          bytes = Number(inst.rt.getSystemContext().dump(usage)?.memory_used_size ?? 0);
          usage.dispose();
        } catch {}
        post({ t: "reply", id: inst.id, seq: message.seq, value: bytes });
        return;
      }
      case "dispose":
        dispose(inst);
        return;
    }
  });
}
