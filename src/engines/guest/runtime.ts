/**
 * The guest runtime: console, timers, bridged host functions, host modules and the entry that
 * calls the default export. It is the only trusted code inside a guest realm.
 *
 * SELF-CONTAINED: injected with `toString()` before any guest code runs, so it captures the
 * builtins it needs up front and keeps its state in this closure, out of the guest's reach.
 * It talks to the host only through the `host` callbacks, and only with text and numbers.
 */
import type { Codec } from "../../core/codec.js";
import type { FormatLogArgs } from "./inspect.js";

/** Synchronous callbacks into the host. They carry strings and numbers only. */
export interface GuestHostCallbacks {
  log(level: string, message: string): void;
  /** Start host call `callId` to bridged function `fnId`; the host answers with `settle`. */
  call(callId: number, fnId: number, argsText: string): void;
  /** Arm timer `timerId`; the host answers with `fire` after `ms`. A negative `ms` cancels it. */
  timer(timerId: number, ms: number): void;
  /** The run is over: kind is "ok" | "throw" | "fail"; text is the encoded outcome. */
  done(kind: string, text: string): void;
}

export interface GuestRuntimeConfig {
  maxTimers: number;
  maxPendingCalls: number;
}

/** What the host holds references to. */
export interface GuestInternals {
  /** Start a run: per-run input and caps. */
  begin(inputText: string, maxOutputChars: number, maxLogEntries: number, maxLogBytes: number): void;
  /** Install bindings: `{ globals: {name: Desc}, modules: {specifier: Desc} }` as JSON text. */
  install(bindingsText: string): void;
  settle(callId: number, ok: boolean, text: string): void;
  fire(timerId: number): void;
  /** Called by the driver module with the guest module's namespace. */
  entry(ns: Record<string, unknown>): void;
  /** Call a dotted export path with encoded args (the warm path). */
  call(ns: Record<string, unknown>, path: string, argsText: string): void;
}

export function installRuntime(
  host: GuestHostCallbacks,
  codec: Codec,
  formatLogArgs: FormatLogArgs,
  config: GuestRuntimeConfig,
): GuestInternals {
  const g = globalThis as unknown as Record<string, unknown>;
  const PromiseCtor = Promise;
  const PromiseReject = Promise.reject.bind(Promise);
  const MapCtor = Map;
  const RangeErrorCtor = RangeError;
  const TypeErrorCtor = TypeError;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const ownKeys = Object.keys;
  const defineProperty = Object.defineProperty;
  const hasOwn = (o: object, k: string) => Object.hasOwn(o, k);
  const apply = Reflect.apply;

  const pendingCalls = new MapCtor<number, { resolve(v: unknown): void; reject(e: unknown): void }>();
  const timers = new MapCtor<number, { fn: (...a: unknown[]) => unknown; args: unknown[]; ms: number; repeat: boolean }>();
  const modules = new MapCtor<string, unknown>();
  let callSeq = 0;
  let timerSeq = 0;
  const run = {
    inputText: '{"$":"u"}',
    maxOutputChars: 0,
    maxLogEntries: 0,
    maxLogBytes: 0,
    logEntries: 0,
    logBytes: 0,
    entered: false,
  };

  function define(target: object, name: string, value: unknown, enumerable = false): void {
    defineProperty(target, name, { value, writable: true, configurable: true, enumerable });
  }

  // ---- host calls ---------------------------------------------------------------------------
  function hostCall(fnId: number, args: unknown[]): Promise<unknown> {
    let text: string;
    try {
      text = codec.encode(args, "args");
    } catch (error) {
      return PromiseReject(error);
    }
    if (pendingCalls.size >= config.maxPendingCalls) {
      return PromiseReject(new RangeErrorCtor(`too many host calls in flight (limit ${config.maxPendingCalls})`));
    }
    const id = ++callSeq;
    return new PromiseCtor((resolve, reject) => {
      pendingCalls.set(id, { resolve, reject });
      host.call(id, fnId, text);
    });
  }

  type Desc = { f: number; n: string } | { d: string } | { o: Record<string, Desc> };

  function build(desc: Desc): unknown {
    if ("f" in desc) {
      const fnId = desc.f;
      // A named, ordinary guest function: the guest never holds anything of the host.
      const holder = {
        [desc.n](...args: unknown[]) {
          return hostCall(fnId, args);
        },
      };
      return holder[desc.n];
    }
    if ("d" in desc) return codec.decode(desc.d);
    const out: Record<string, unknown> = {};
    for (const key of ownKeys(desc.o)) define(out, key, build(desc.o[key]), true);
    return out;
  }

  // ---- console --------------------------------------------------------------------------------
  function emit(level: string, args: unknown[]): void {
    if (run.logEntries > run.maxLogEntries || run.logBytes > run.maxLogBytes) return;
    const message = formatLogArgs(args, run.maxLogBytes + 1);
    run.logEntries++;
    run.logBytes += message.length;
    host.log(level, message);
  }
  const consoleObject: Record<string, unknown> = {};
  for (const level of ["log", "info", "warn", "error", "debug"]) {
    define(consoleObject, level, (...args: unknown[]) => emit(level, args), true);
  }
  define(consoleObject, "trace", (...args: unknown[]) => emit("debug", args), true);
  define(consoleObject, "dir", (value: unknown) => emit("log", [value]), true);
  define(consoleObject, "table", (value: unknown) => emit("log", [value]), true);
  define(
    consoleObject,
    "assert",
    (condition: unknown, ...args: unknown[]) => {
      if (!condition) emit("error", ["Assertion failed", ...args]);
    },
    true,
  );
  define(g, "console", consoleObject);

  // ---- timers ----------------------------------------------------------------------------------
  function arm(fn: unknown, ms: unknown, args: unknown[], repeat: boolean): number {
    if (typeof fn !== "function") throw new TypeErrorCtor("the callback must be a function (strings are not evaluated)");
    if (timers.size >= config.maxTimers) {
      throw new RangeErrorCtor(`too many pending timers (limit ${config.maxTimers})`);
    }
    const delay = Math.max(0, Math.min(Number(ms) || 0, 2147483647));
    const id = ++timerSeq;
    timers.set(id, { fn: fn as (...a: unknown[]) => unknown, args, ms: delay, repeat });
    host.timer(id, delay);
    return id;
  }
  function cancel(id: unknown): void {
    // Tell the host too, so cleared timers never pile up as host handles.
    if (timers.delete(Number(id))) host.timer(Number(id), -1);
  }
  define(g, "setTimeout", (fn: unknown, ms?: unknown, ...args: unknown[]) => arm(fn, ms, args, false));
  define(g, "setInterval", (fn: unknown, ms?: unknown, ...args: unknown[]) => arm(fn, ms, args, true));
  define(g, "clearTimeout", cancel);
  define(g, "clearInterval", cancel);
  define(g, "queueMicrotask", (fn: unknown) => {
    if (typeof fn !== "function") throw new TypeErrorCtor("queueMicrotask needs a function");
    PromiseCtor.resolve().then(() => (fn as () => void)());
  });

  // ---- modules, entry and call ------------------------------------------------------------------
  define(g, "__cordon_module", (specifier: string) => modules.get(specifier));

  function fail(error: unknown): boolean {
    const code = (error as { code?: unknown } | null)?.code;
    if (code === "ERR_NOT_SERIALIZABLE" || code === "ERR_OUTPUT_TOO_LARGE") {
      host.done("fail", stringify({ code, message: String((error as Error).message) }));
      return true;
    }
    return false;
  }

  function finish(value: unknown, ns: Record<string, unknown> | undefined): void {
    let budget = run.maxOutputChars;
    let valueText: string;
    try {
      valueText = codec.encode(value, "value", budget);
    } catch (error) {
      if (fail(error)) return;
      throw error;
    }
    budget -= valueText.length;
    let exportsText = "";
    const skipped: string[] = [];
    if (ns) {
      for (const key of ownKeys(ns)) {
        if (key === "default") continue;
        let item: unknown;
        try {
          item = ns[key];
        } catch {
          skipped.push(key);
          continue;
        }
        if (typeof item === "function") {
          skipped.push(key);
          continue;
        }
        try {
          const text = codec.encode(item, `exports.${key}`, budget);
          budget -= text.length;
          exportsText += `${exportsText ? "," : ""}${stringify(key)}:${text}`;
        } catch (error) {
          if ((error as { code?: unknown }).code === "ERR_NOT_SERIALIZABLE") skipped.push(key);
          else if (fail(error)) return;
          else throw error;
        }
      }
    }
    host.done("ok", `{"v":${valueText},"x":{${exportsText}},"k":${stringify(skipped)}}`);
  }

  async function settleRun(work: () => unknown, ns: Record<string, unknown> | undefined): Promise<void> {
    try {
      finish(await work(), ns);
    } catch (error) {
      host.done("throw", codec.encodeError(error));
    }
  }

  return {
    begin(inputText, maxOutputChars, maxLogEntries, maxLogBytes) {
      run.inputText = inputText;
      run.maxOutputChars = maxOutputChars;
      run.maxLogEntries = maxLogEntries;
      run.maxLogBytes = maxLogBytes;
      run.logEntries = 0;
      run.logBytes = 0;
      run.entered = false;
    },
    install(bindingsText) {
      const bindings = parse(bindingsText) as { globals: Record<string, Desc>; modules: Record<string, Desc> };
      for (const name of ownKeys(bindings.globals)) define(g, name, build(bindings.globals[name]), true);
      for (const specifier of ownKeys(bindings.modules)) modules.set(specifier, build(bindings.modules[specifier]));
    },
    settle(callId, ok, text) {
      const pending = pendingCalls.get(callId);
      if (!pending) return;
      pendingCalls.delete(callId);
      if (ok) pending.resolve(codec.decode(text));
      else pending.reject(codec.decode(text));
    },
    fire(timerId) {
      const timer = timers.get(timerId);
      if (!timer) return;
      if (timer.repeat) host.timer(timerId, timer.ms);
      else timers.delete(timerId);
      apply(timer.fn, undefined, timer.args);
    },
    entry(ns) {
      // One-shot: the driver module calls this once the guest module has fully evaluated.
      if (run.entered) return;
      run.entered = true;
      void settleRun(() => {
        const main = ns.default;
        return typeof main === "function" ? main(codec.decode(run.inputText)) : main;
      }, ns);
    },
    call(ns, path, argsText) {
      void settleRun(() => {
        const parts = path.split(".");
        let owner: unknown;
        let target: unknown = ns;
        for (const part of parts) {
          if (
            target === null ||
            (typeof target !== "object" && typeof target !== "function") ||
            !hasOwnOrInherited(target, part)
          ) {
            target = undefined;
            break;
          }
          owner = target;
          target = (target as Record<string, unknown>)[part];
        }
        if (typeof target !== "function") {
          host.done("missing", stringify({ path }));
          return new PromiseCtor(() => {});
        }
        return apply(target as (...a: unknown[]) => unknown, owner, codec.decode(argsText) as unknown[]);
      }, undefined);
    },
  };

  function hasOwnOrInherited(target: object, key: string): boolean {
    return hasOwn(target, key) || key in target;
  }
}
