/**
 * A QuickJS worker's instances (worker.ts): each a WASM instance of QuickJS with its own capped
 * memory, booted once per thread as a template and copied from its memory after that (decision
 * 013), and the host functions the guest runtime calls.
 *
 * SELF-CONTAINED, as worker.ts: evaluated in the worker from `quickjsInstances.toString()`, so
 * it imports nothing at run time and gets what it shares with the rest of the worker as `ctx`.
 */
import type { MemoryPages, memorySnapshots } from "./memory-snapshot.js";
import type { Instance, quickjsCrossings } from "./worker-crossing.js";
import type { QuickJSWorkerData } from "./worker.js";

// biome-ignore lint/suspicious/noExplicitAny: QuickJS and its handles are loaded by path at run time, untyped.
type Any = any;

/**
 * A booted instance's memory, as pages over a fresh module's, and the pointers into it that a copy
 * wraps (decision 013). Plain data: a thread sends the one it made to the host, which hands it to
 * the threads it starts later.
 */
export interface QuickJSTemplate {
  pages: MemoryPages;
  rt: number;
  ctx: number;
  fns: Record<string, number>;
  helper: number;
  reseed: number;
}

export interface InstancesContext {
  req(id: string): Any;
  workerData: QuickJSWorkerData;
  /** The warm-up runs (engines/warm-up-modules.ts), once the host has sent them. */
  warmUpModules: Promise<string>;
  post(message: unknown): void;
  instances: Map<number, Instance>;
  crossings: ReturnType<typeof quickjsCrossings>;
  release(handle: Any): void;
}

export function quickjsInstances({ req, workerData, warmUpModules, post, instances, crossings, release }: InstancesContext) {
  const core = req(workerData.corePath);
  const variantModule = req(workerData.variantPath);
  const variant = variantModule.default ?? variantModule;
  const names = workerData.callbackNames;
  const { describeError, publish, enter, leave, pump, bareOutOfMemory, callInternal } = crossings;
  /**
   * Every instance gets its own WASM instance of QuickJS (the compiled module is shared), with a
   * linear memory capped at its memory limit plus the runtime's own needs. So the cap is hard:
   * QuickJS's own accounting misses ArrayBuffer data, the capped memory does not. And a failure
   * that leaves QuickJS unusable (out of memory in C, a failed assertion) ends only that instance.
   */
  const Wasm = (globalThis as Any).WebAssembly;
  const wasmModule: Promise<unknown> = Wasm.compile(workerData.wasm.bytes);
  const PAGE = 65536;
  // What a memory's cap allows QuickJS beyond the guest's memory limit: its static data, its 5 MB
  // stack, the runtime, its atoms and the guest runtime (the module once declared this much as its
  // minimum; a memory now starts at what the static data and stack need, and grows).
  const BASE_PAGES = 256;
  const snapshots = new Function(`return (${workerData.memorySnapshotsSource})()`)() as ReturnType<typeof memorySnapshots>;

  // The host's own services, evaluated from the source the host sent (this thread cannot import).
  const services = new Function(`return (${workerData.hostServicesSource})()`)() as {
    parseUrl(input: unknown, base?: unknown): string;
    setUrlPart(href: unknown, part: unknown, value: unknown): string;
    randomBytes(n: unknown): Uint8Array;
  };

  /**
   * A fresh WebAssembly instance of QuickJS whose memory is capped for `memoryMb`, starting at
   * `initialPages` (a copy starts at its template's size, so the pages fit).
   */
  async function newModule(
    memoryMb: number,
    initialPages = workerData.wasm.minimumPages,
  ): Promise<{ module: Any; memory: Any; maxPages: number }> {
    const maxPages = BASE_PAGES + Math.ceil((memoryMb * 1024 * 1024) / PAGE);
    const memory = new Wasm.Memory({ initial: Math.min(initialPages, maxPages), maximum: maxPages });
    const module = await core.newQuickJSWASMModuleFromVariant(
      core.newVariant(variant, { wasmModule: await wasmModule, wasmMemory: memory }),
    );
    // quickjs-emscripten's JavaScript side copies what a host function hands the guest (a string,
    // an ArrayBuffer) into memory it takes with _malloc, without looking at the pointer: out of
    // memory it wrote the bytes at address 0, over the module's static data, and the next call
    // trapped ("memory access out of bounds"). Refused instead, as QuickJS refuses an allocation.
    const emscripten = (module as Any).module;
    const malloc = emscripten?._malloc as ((n: number) => number) | undefined;
    if (malloc) {
      emscripten._malloc = (n: number) => {
        const pointer = malloc(n);
        if (pointer === 0 && n > 0) throw Object.assign(new Error("out of memory"), { name: "InternalError" });
        return pointer;
      };
    }
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
      helper: undefined,
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
    /**
     * A guest's text whole: QuickJS hands a string over as a C string, which ends at its first NUL
     * (a log line "a\0b" read "a"; "http://a.test\0.evil.test/" parsed as "http://a.test/",
     * where v8 refuses it). Codec texts never hold a raw NUL; log lines and URLs may.
     */
    const text = (h: Any) => {
      if (h === undefined) return undefined;
      const read = vm.getString(h);
      const length = vm.getProp(h, "length");
      const whole = vm.typeof(length) !== "number" || vm.getNumber(length) === read.length;
      length.dispose();
      if (whole) return read;
      const kind = vm.newNumber(1);
      try {
        const quoted = vm.unwrapResult(vm.callFunction(inst.helper, vm.undefined, kind, h));
        const json = vm.getString(quoted);
        quoted.dispose();
        return JSON.parse(json) as string;
      } finally {
        kind.dispose();
      }
    };
    const num = (h: Any) => (h === undefined ? undefined : vm.getNumber(h));
    // Once the host has stopped the guest, every host function throws at once. QuickJS asks the
    // interrupt handler only every ~10,000 operations: a loop whose host calls are slow (a port
    // set on a 1 MiB URL, a few ms each) ran on for seconds after its run had ended, on a core
    // the host counted for no one, until the thread was ended (STUCK_MS).
    const stopped =
      (fn: (...args: Any[]) => Any) =>
      (...args: Any[]) => {
        if (Atomics.load(inst.control, 0) !== 0) throw new Error("the run was stopped");
        return fn(...args);
      };
    const functions: [string, (...args: Any[]) => Any][] = [
      [
        names.log,
        (level, message, index) => post({ t: "log", id, level: str(level), message: text(message), index: num(index) }),
      ],
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
          // fail to read the error it threw (the runtime then says so): name it, by the rule a
          // crossing's own failure is read with (crossings.bareOutOfMemory).
          if (str(kind) === "t" && bareOutOfMemory(outcome, inst)) {
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
            services.parseUrl(text(input), base === undefined || vm.typeof(base) === "undefined" ? undefined : text(base)),
          ),
      ],
      [names.setUrlPart, (href, part, value) => vm.newString(services.setUrlPart(text(href), text(part), text(value)))],
      [
        names.randomBytes,
        (n) => {
          const buffer = vm.newArrayBuffer(services.randomBytes(num(n)).buffer);
          const kind = vm.newNumber(0);
          const bytes = vm.unwrapResult(vm.callFunction(inst.helper, vm.undefined, kind, buffer));
          kind.dispose();
          buffer.dispose();
          return bytes;
        },
      ],
    ];
    return functions.map(([name, fn]) => [name, stopped(fn)]);
  }

  const INTERNALS = ["begin", "start", "runFactory", "settle", "fire", "call", "warmUp", "drainRandom"];

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
    // Uint8Array is taken now, before any guest code: read when called, the global was the guest's
    // to replace, and its function then ran inside this host function with the host's random bytes.
    inst.helper = vm.unwrapResult(
      vm.evalCode(
        "((Bytes, stringify) => (kind, value) => (kind === 0 ? new Bytes(value) : stringify(value)))(Uint8Array, JSON.stringify)",
        "<cordon>",
      ),
    );
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
      const modules = await warmUpModules;
      enter(inst);
      try {
        callInternal(inst, "warmUp", [modules]);
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

  let template: Promise<QuickJSTemplate | undefined> | undefined;

  /**
   * This thread's template, once: the one the host handed it (made by an earlier thread of this
   * process), or else one booted here (warmed up), whose memory's pages are kept and sent to the
   * host for later threads. Undefined where copying cannot be trusted: instantiating the module
   * twice must give the same memory, and a copy must run. Instances are then booted, as before.
   */
  function templateOnce(): Promise<QuickJSTemplate | undefined> {
    template ??= (async () => {
      try {
        const given = workerData.template;
        const made = given ?? (await bootTemplate());
        if (!made) return undefined;
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
        if (!(dx >= 0 && dy >= 0 && dx !== dy)) return undefined;
        // Before this thread has answered anything, so before any guest ran here: the host takes
        // a template only then (threads.ts).
        if (!given) post({ t: "template", id: 0, template: made });
        return made;
      } catch {
        return undefined;
      }
    })();
    return template;
  }

  /**
   * Boot one instance (warmed up) and keep the pages where its memory differs from a fresh
   * module's: most of its time page faults reading the three memories.
   */
  async function bootTemplate(): Promise<QuickJSTemplate | undefined> {
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
    return {
      pages,
      rt: inst.rt.rt.value,
      ctx: inst.vm.ctx.value,
      fns,
      helper: inst.helper.value,
      reseed: inst.reseed.value,
    };
  }

  /** An instance copied from the template's memory: ~2 ms here, against ~13 ms to boot one. */
  async function copy(from: QuickJSTemplate, id: number, memoryMb: number, controlBuffer: SharedArrayBuffer): Promise<Instance> {
    const { module, memory, maxPages } = await newModule(memoryMb, Math.ceil(from.pages.byteLength / PAGE));
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
    inst.helper = vm.memory.heapValueHandle(from.helper);
    inst.reseed = vm.memory.heapValueHandle(from.reseed);
    const seed = freshSeed().map((n) => vm.newNumber(n));
    vm.unwrapResult(vm.callFunction(inst.reseed, vm.undefined, ...seed)).dispose();
    for (const handle of seed) handle.dispose();
    // Nor the template's random bytes, had it drawn any (random-pool.ts).
    vm.unwrapResult(vm.callFunction(inst.fns.drainRandom, vm.undefined)).dispose();
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
      inst.helper?.dispose();
      inst.reseed?.dispose();
      inst.vm.dispose();
      inst.rt.dispose();
    } catch {
      // Dropped with its WASM instance: nothing else shares it.
    }
  }

  return { create, dispose };
}
