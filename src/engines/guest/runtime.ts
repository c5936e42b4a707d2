/**
 * The guest runtime: console, timers, bridged host functions, host modules and the entry that
 * calls the default export. It is the only trusted code inside a guest realm.
 *
 * SELF-CONTAINED: injected with `toString()` before any guest code runs, so it captures the
 * builtins it needs up front and keeps its state in this closure, out of the guest's reach.
 * It talks to the host only through the `host` callbacks, and only with text and numbers. Text
 * is joined with `+`, never a template literal: QuickJS compiles one to a call of the guest's
 * String.prototype.concat, which rewrote outcomes (a throw read as ERR_MEMORY_LIMIT).
 */
import type { Codec } from "../../core/codec.js";
import type { RunMode } from "../../core/engine.js";
import type { FormatLogArgs } from "./inspect.js";

/** Synchronous callbacks into the host. They carry strings and numbers only. */
export interface GuestHostCallbacks {
  log(level: string, message: string, index: number): void;
  /**
   * Start host call `callId` to bridged function `fnId`; the host answers with `settle`. `fnId`
   * CANCEL_CALL (-1, as a timer's negative `ms`): the guest gave up on call `callId` (an aborted
   * fetch); the host ends its work and still answers.
   */
  call(callId: number, fnId: number, argsText: string): void;
  /** Arm timer `timerId`; the host answers with `fire` after `ms`. A negative `ms` cancels it. */
  timer(timerId: number, ms: number): void;
  /**
   * The run, or call `index` of a crossing, is over: kind is "o" (ok) | "v" (ok, a prefix call's
   * value alone) | "t" (thrown) | "f" (failed); text is the encoded outcome. A run is call 0.
   */
  done(kind: string, text: string, index: number): void;
}

/** A call crossing's outcomes, some still to come (see lastLate in installRuntime). */
type PendingOutcomes = { text: string; next: number; size: number };

/** The `fnId` of `host.call` that cancels call `callId` (the runtime writes it as -1: it is self-contained). */
export const CANCEL_CALL = -1;

export interface GuestRuntimeConfig {
  maxTimers: number;
  /** The longest delay a timer takes (setTimeout's own bound). */
  maxTimerMs: number;
  maxPendingCalls: number;
  /** Host calls in flight together may hold this many times maxBridgeCallBytes of arguments. */
  pendingArgsFactor: number;
  /**
   * Realms whose Request/Response bodies are streams (the deno engine): buffer the bodies among
   * `values` before they are encoded. Returns undefined when there is nothing to read. With
   * `maxBytes`, a body past it is refused as it arrives and the promise resolves to false.
   */
  readBodies?: (values: unknown[], maxBytes?: number) => Promise<boolean> | undefined;
  /** Makes what fetch resolves to a fetched Response: its headers immutable (v8, quickjs). */
  fetched?: (response: unknown) => unknown;
  /**
   * A Request's body's bytes, where bodies are buffered (v8, quickjs): fetch refuses a body past
   * the egress's cap (maxBridgeCallBytes / bridgeBytesPerBodyByte) as the egress would, before it
   * crosses. Past the bridge's cap it was ERR_BRIDGE_PAYLOAD_TOO_LARGE instead (a RangeError).
   */
  bodyLength?: (request: unknown) => number;
  bridgeBytesPerBodyByte?: number;
}

/**
 * Text from the host: a string, or (the v8 engine, from 512 characters) the string inside a
 * one-element array, which isolated-vm copies into the isolate's heap where a bare string would
 * stay outside it until a full collection (src/engines/v8/crossing-text.ts).
 */
export type HostText = string | readonly [string];

/** The part of a guest AbortSignal the runtime reads. */
type GuestSignal = { aborted: boolean; reason: unknown; addEventListener(type: string, fn: () => void): void };

/** What the host holds references to. */
export interface GuestInternals {
  /** Start a run: per-run input and caps; clears what earlier runs left pending. */
  begin(
    mode: RunMode,
    inputText: HostText,
    maxOutputChars: number,
    maxLogEntries: number,
    maxLogBytes: number,
    maxBridgeCallChars: number,
  ): void;
  /** Install bindings: `{ globals: {name: Desc}, modules: {specifier: Desc} }` as JSON text. */
  install(bindingsText: HostText): void;
  /**
   * A whole run in one crossing: install bindings (unless null), begin, evaluate the module's
   * script form, call its default export. The outcome arrives through host.done.
   */
  runScript(
    bindingsText: HostText | null,
    mode: RunMode,
    inputText: HostText,
    maxOutputChars: number,
    maxLogEntries: number,
    maxLogBytes: number,
    maxBridgeCallChars: number,
    code: HostText,
    filename: string,
  ): void;
  /**
   * runScript for an engine that compiles the script form itself (QuickJS, so its stacks name
   * the guest's file): install (unless null), begin, evaluate `factory`, call the entry.
   */
  runFactory(
    factory: (h: GuestInternals["helpers"]) => Record<string, unknown>,
    bindingsText: HostText | null,
    mode: RunMode,
    inputText: HostText,
    maxOutputChars: number,
    maxLogEntries: number,
    maxLogBytes: number,
    maxBridgeCallChars: number,
  ): void;
  /** install + begin in one crossing: how a run on a fresh instance starts. */
  start(
    bindingsText: HostText,
    mode: RunMode,
    inputText: HostText,
    maxOutputChars: number,
    maxLogEntries: number,
    maxLogBytes: number,
    maxBridgeCallChars: number,
  ): void;
  settle(callId: number, ok: boolean, text: HostText): void;
  fire(timerId: number): void;
  /** Called by the driver module with the guest module's namespace (in "prepare" mode it is kept). */
  entry(ns: Record<string, unknown>): void;
  /**
   * Call a dotted export path of the prepared prefix once per encoded argument list (joined by
   * U+0001), one call after another. Returns the outcomes joined by U+0001 ("p" for one that will
   * arrive through host.done). The caps are sent only when they changed.
   */
  call(
    path: string,
    joinedArgs: HostText,
    maxOutputChars?: number,
    maxLogEntries?: number,
    maxLogBytes?: number,
    maxBridgeCallChars?: number,
  ): string;
  /**
   * The outcomes the latest `call` returned, once (then undefined). When the crossing that made
   * them failed as it ended (isolated-vm throws what rejected a promise nothing handled, after
   * the call returned), the host reads them here: an outcome already made stands.
   */
  recover(): string | undefined;
  /**
   * For a serving task (serve.ts) whose call returned a promise: from now on the latest call's
   * outcomes still to come are gathered here instead of crossing through host.done. False when
   * none is to come.
   */
  gather(): boolean;
  /**
   * The latest call's outcomes joined, once every one has come (undefined before); `final`: now,
   * with "p" for each still to come, which from then on crosses through host.done as usual.
   */
  gathered(final: boolean): string | undefined;
  /** Whether a host call or a timer is pending: its answer can only come once the task ends. */
  waitsOnHost(): boolean;
  /** A no-op round trip: lets the host wait until the isolate is idle. */
  ping(): boolean;
  /** A filename fit for a `//# sourceURL=` comment: its line terminators made "_" (see runScript). */
  sourceName(filename: string): string;
  /** See Codec.limitCopies: set once, by engines whose realm aborts the process on a heap overrun (v8). */
  limitCopies(chars: number): void;
  /**
   * Run cordon's own modules (JSON: [{ code, inputText, filename }]) as one-off runs whose
   * outcomes go nowhere, so V8 compiles and tiers up the per-run path before a guest's run.
   */
  warmUp(modulesJson: string): void;
  /** esbuild's module helpers, made once: a script form takes them as its parameter (core/script-helpers.ts). */
  helpers: Readonly<Record<string, unknown>>;
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
  const PromiseResolve = Promise.resolve.bind(Promise);
  const RangeErrorCtor = RangeError;
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const stringify = JSON.stringify;
  const StringCtor = String;
  // A timer's delay is clamped with these: the guest's own let it send the host any number.
  const NumberCtor = Number;
  const mathMax = Math.max;
  const mathFloor = Math.floor;
  const parse = JSON.parse;
  const ownKeys = Object.keys;
  const defineProperty = Object.defineProperty;
  const objectHasOwn = Object.hasOwn;
  const hasOwn = (o: object, k: string) => objectHasOwn(o, k);
  const create = Object.create;
  const setPrototypeOf = Object.setPrototypeOf;
  const apply = Reflect.apply;
  // The runtime's own promises are chained with the `then` of boot time: a guest may replace
  // Promise.prototype.then, and would otherwise receive (and forge) every outcome's text.
  const promiseThen = Promise.prototype.then;
  const thenOf = <T, R>(
    promise: Promise<T>,
    ok: (value: T) => R | PromiseLike<R>,
    failed?: (error: unknown) => R | PromiseLike<R>,
  ): Promise<R> => apply(promiseThen, promise, [ok, failed]) as Promise<R>;
  const indexOfString = String.prototype.indexOf;
  const sliceString = String.prototype.slice;
  // See HostText. An array the host's copy made in this realm: its element 0 is its own.
  const hostText = (text: HostText): string => (typeof text === "string" ? text : text[0]);
  const hostTextOrNull = (text: HostText | null): string | null => (text === null ? null : hostText(text));
  // Indirect eval, captured before any guest code: evaluates in the global scope.
  const indirectEval = g.eval as (code: string) => unknown;
  // The captured methods, bound once before any guest code, called without an argument array
  // (Reflect.apply takes one per call: in QuickJS's interpreter that, and a property descriptor
  // per part, made splitting a call's arguments 1.8-2.7 µs a part; this way 0.6-0.7).
  const callOf = Function.prototype.call;
  const indexOfIn = callOf.bind(indexOfString) as (text: string, search: string, from: number) => number;
  const sliceOf = callOf.bind(sliceString) as (text: string, from: number, to?: number) => string;
  const trimStartOf = callOf.bind(String.prototype.trimStart) as (text: string) => string;
  const charCodeOf = callOf.bind(String.prototype.charCodeAt) as (text: string, at: number) => number;
  // An Error by its prototype chain: `instanceof` asks Error[Symbol.hasInstance], which a guest
  // can define (then a thrown Error was reported as thrown data, or data thrown across as one).
  const inherits = callOf.bind(Object.prototype.isPrototypeOf) as (proto: object, value: unknown) => boolean;
  const ErrorProto = Error.prototype;
  const isError = (value: unknown) => inherits(ErrorProto, value);
  const SyntaxErrorProto = SyntaxError.prototype;
  // Read once, now: absent (v8, quickjs), a later read would find one a guest put on Object.prototype.
  const readBodies = config.readBodies;
  // The same, absent on deno.
  const bodyLength = config.bodyLength;
  const perBodyByte = config.bridgeBytesPerBodyByte ?? 1;
  /** Split parts, in an object without a prototype: storing into it meets no index setter a guest put on Array.prototype. */
  interface Parts {
    length: number;
    [index: number]: string;
  }
  // Not String.prototype.split: it looks up the separator's Symbol.split, which a guest can
  // define on String.prototype (and so garble every call's arguments).
  const split = (text: string, separator: string): Parts => {
    const parts = create(null) as Parts;
    let n = 0;
    let from = 0;
    for (;;) {
      const at = indexOfIn(text, separator, from);
      if (at < 0) break;
      parts[n++] = sliceOf(text, from, at);
      from = at + separator.length;
    }
    parts[n++] = sliceOf(text, from);
    parts.length = n;
    return parts;
  };

  // esbuild's module helpers, as esbuild writes them (same semantics, made once per instance):
  // script forms take these instead of compiling their own copy on every run.
  const getOwnPropDesc = Object.getOwnPropertyDescriptor;
  const getOwnPropNames = Object.getOwnPropertyNames;
  const hasOwnProp = Object.prototype.hasOwnProperty;
  // Unlike esbuild's text: indexed loops, captured methods and descriptors without a prototype,
  // since these run after guest code, which may have replaced the array iterator,
  // Function.prototype.call, or put `get`/`value`/`set` (or enumerable names) on Object.prototype.
  const copyProps = (to: object, from: unknown, except?: string, desc?: PropertyDescriptor) => {
    if ((from && typeof from === "object") || typeof from === "function") {
      const keys = getOwnPropNames(from);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (!hasOwn(to, key) && key !== except)
          defineProperty(to, key, {
            __proto__: null,
            get: () => (from as Record<string, unknown>)[key],
            // biome-ignore lint/suspicious/noAssignInExpressions: esbuild's own helper, kept as it is.
            enumerable: !(desc = getOwnPropDesc(from, key)) || desc.enumerable,
          } as PropertyDescriptor);
      }
    }
    return to;
  };
  const helpers = Object.freeze({
    __defProp: defineProperty,
    __getOwnPropDesc: getOwnPropDesc,
    __getOwnPropNames: getOwnPropNames,
    __hasOwnProp: hasOwnProp,
    __export: (target: object, all: Record<string, () => unknown>) => {
      // Own names only: `for…in` also listed a name the guest put on Object.prototype, as an export.
      const names = ownKeys(all);
      for (let i = 0; i < names.length; i++)
        defineProperty(target, names[i], { __proto__: null, get: all[names[i]], enumerable: true } as PropertyDescriptor);
    },
    __copyProps: copyProps,
    // A script form's exports object already holds one enumerable getter per export, which is
    // all the entry reads (own enumerable keys): esbuild's copy with an __esModule marker would
    // only add a getter per export to every run.
    __toCommonJS: (mod: object) => mod,
  });

  /**
   * Entries by numeric id in an object without a prototype, counted by the runtime: a Map's
   * methods and its size getter are the guest's to replace (a patched Map.prototype size let 900
   * host calls be in flight past the limit of 256).
   */
  function idTable<T>() {
    let entries: Record<number, T> = create(null);
    let count = 0;
    return {
      get: (id: number): T | undefined => entries[id],
      set(id: number, value: T): void {
        if (!(id in entries)) count++;
        entries[id] = value;
      },
      delete(id: number): boolean {
        if (!(id in entries)) return false;
        delete entries[id];
        count--;
        return true;
      },
      clear(): void {
        entries = create(null);
        count = 0;
      },
      /**
       * The ids of the entries `keep` picks, in a list without a prototype (an index setter a
       * guest put on Array.prototype never sees them): loop over it by index.
       */
      idsWhere(keep: (value: T) => boolean): { length: number; [index: number]: number } {
        const ids: { length: number; [index: number]: number } = create(null);
        ids.length = 0;
        for (const key in entries) if (keep(entries[key as unknown as number])) ids[ids.length++] = +key;
        return ids;
      },
      get size(): number {
        return count;
      },
    };
  }
  /** `chars`: the length of the call's arguments, held by the host until it answers. */
  const pendingCalls = idTable<{ resolve(v: unknown): void; reject(e: unknown): void; chars: number }>();
  /** The arguments of the calls in pendingCalls, together: each is a copy the host holds. */
  let pendingChars = 0;
  /** `owner`: the index of the call that armed it, in a crossing of several calls. */
  const timers = idTable<{ fn: (...a: unknown[]) => unknown; args: unknown[]; ms: number; repeat: boolean; owner: number }>();
  /**
   * Host modules by specifier, in an object without a prototype: through a Map's methods (the
   * guest's to replace) a run was handed the table, and changed what later runs imported.
   */
  let modules: Record<string, unknown> = create(null);
  let callSeq = 0;
  let timerSeq = 0;
  /** The prepared prefix's module namespace: what `call` resolves export paths against. */
  let prefix: Record<string, unknown> | undefined;
  const run = {
    mode: "run",
    inputText: '{"$":"u"}',
    maxOutputChars: 0,
    maxLogEntries: 0,
    maxLogBytes: 0,
    /** The run's maxBridgeCallBytes: a host call's encoded arguments are refused past it, before they are copied. */
    maxBridgeCallChars: 0,
    logEntries: 0,
    logBytes: 0,
    entered: false,
    /** Which call of a batch is running: logs and outcomes carry it. */
    index: 0,
    /** A warm-up run (see warmUp): its outcome is not reported. */
    quiet: false,
    /**
     * False once the run, or the call at `index`, has delivered its outcome. Calls of a crossing
     * run one at a time, so the call at `index` is the only one that may still be pending: code
     * running while it is over is a leftover (a microtask the outcome did not wait for), and the
     * timers it arms would fire after the outcome, outside every limit.
     */
    open: true,
  };

  function define(target: object, name: string, value: unknown, enumerable = false): void {
    // Without a prototype: a `get` or `set` the guest put on Object.prototype would be read as part of it.
    defineProperty(target, name, {
      __proto__: null,
      value,
      writable: true,
      configurable: true,
      enumerable,
    } as PropertyDescriptor);
  }

  /** A function under its web name (`setTimeout.name` is "setTimeout", as in Node and Deno). */
  function defineNamed(target: object, name: string, fn: (...args: never[]) => unknown, enumerable = false): void {
    defineProperty(fn, "name", { value: name, configurable: true });
    define(target, name, fn, enumerable);
  }

  // ---- host calls ---------------------------------------------------------------------------
  /** `signal` (a guest AbortSignal): once it aborts, the host is told to end the call (CANCEL_CALL). */
  function hostCall(fnId: number, args: unknown[], signal?: GuestSignal): Promise<unknown> {
    // A leftover's call (see run.open) is never made, as its timers are never armed: made, it
    // was counted in, and its answer awaited by, whichever call `run.index` last named.
    if (!run.open) return new PromiseCtor(() => {});
    const reading = readBodies?.(args);
    if (reading) return thenOf(reading, () => hostCall(fnId, args, signal));
    if (signal?.aborted) return PromiseReject(signal.reason);
    let text: string;
    try {
      // Capped: unbounded, a sparse array of 2**32-1 items ran into the wall time (QuickJS, Deno)
      // or the memory limit (V8) before the host could refuse the text.
      text = codec.encode(args, "args", run.maxBridgeCallChars);
    } catch (error) {
      if (codec.threw(error) && (error as { code?: unknown }).code === "ERR_OUTPUT_TOO_LARGE")
        return PromiseReject(argsTooLarge());
      return PromiseReject(error);
    }
    if (pendingCalls.size >= config.maxPendingCalls) {
      return PromiseReject(new RangeErrorCtor("too many host calls in flight (limit " + config.maxPendingCalls + ")"));
    }
    // One string passed to many slow calls is one copy here and a copy per call on the host.
    if (pendingChars + text.length > run.maxBridgeCallChars * config.pendingArgsFactor) return PromiseReject(argsInFlight());
    const id = ++callSeq;
    const chars = text.length;
    return new PromiseCtor((resolve, reject) => {
      pendingCalls.set(id, { resolve, reject, chars });
      pendingChars += chars;
      host.call(id, fnId, text);
      // Once per call: guest code can hold this listener (a signal is duck-typed), and each
      // cancel is a crossing the host's thread pays for, uncounted: 80 µs each on v8, so a loop
      // calling it kept the host busy while the guest was charged for almost none of it.
      let cancelled = false;
      signal?.addEventListener("abort", () => {
        if (cancelled || !pendingCalls.get(id)) return;
        cancelled = true;
        host.call(id, -1 /* CANCEL_CALL */, "");
      });
    });
  }

  /** A host call's arguments over the run's maxBridgeCallBytes: the guest can catch it; uncaught, it is the run's code. */
  function argsTooLarge(): Error {
    return payloadError(
      "ERR_BRIDGE_PAYLOAD_TOO_LARGE: a host call's arguments are larger than the limit of " +
        run.maxBridgeCallChars +
        " bytes (maxBridgeCallBytes)",
    );
  }

  /** The calls in flight would hold more arguments than the host keeps for one run: wait for some to answer. */
  function argsInFlight(): Error {
    const factor = config.pendingArgsFactor;
    return payloadError(
      "ERR_BRIDGE_PAYLOAD_TOO_LARGE: host calls in flight would hold more than " +
        run.maxBridgeCallChars * factor +
        " bytes of arguments together (" +
        factor +
        " × maxBridgeCallBytes); await some before making more",
    );
  }

  function payloadError(message: string): Error {
    const error = new RangeErrorCtor(message);
    // Defined, not assigned: a setter a guest put on Object.prototype must not swallow them.
    define(error, "code", "ERR_BRIDGE_PAYLOAD_TOO_LARGE", true);
    define(error, "path", "args", true);
    return error;
  }

  type Desc = { f: number; n: string } | { d: string } | { o: Record<string, Desc> };

  function build(desc: Desc): unknown {
    // hasOwn, not `in`: parsed JSON inherits Object.prototype, where a guest may have put an `f`.
    if (hasOwn(desc, "f")) {
      const { f: fnId, n: name } = desc as { f: number; n: string };
      // A named, ordinary guest function: the guest never holds anything of the host.
      const holder = {
        [name](...args: unknown[]) {
          return hostCall(fnId, args);
        },
      };
      return holder[name];
    }
    if (hasOwn(desc, "d")) return codec.decode((desc as { d: string }).d);
    const out: Record<string, unknown> = {};
    const o = (desc as { o: Record<string, Desc> }).o;
    const keys = ownKeys(o);
    for (let i = 0; i < keys.length; i++) define(out, keys[i], build(o[keys[i]]), true);
    return out;
  }

  // ---- console --------------------------------------------------------------------------------
  function emit(level: string, args: unknown[]): void {
    // A leftover's log is dropped: it ran after its call's outcome, and landed in another's.
    if (!run.open) return;
    if (run.logEntries > run.maxLogEntries || run.logBytes > run.maxLogBytes) return;
    const message = formatLogArgs(args, run.maxLogBytes + 1);
    run.logEntries++;
    run.logBytes += message.length;
    host.log(level, message, run.index);
  }
  const consoleObject: Record<string, unknown> = {};
  for (const level of ["log", "info", "warn", "error", "debug"]) {
    defineNamed(consoleObject, level, (...args: unknown[]) => emit(level, args), true);
  }
  defineNamed(consoleObject, "trace", (...args: unknown[]) => emit("debug", args), true);
  defineNamed(consoleObject, "dir", (value: unknown) => emit("log", [value]), true);
  defineNamed(consoleObject, "table", (value: unknown) => emit("log", [value]), true);
  defineNamed(
    consoleObject,
    "assert",
    (condition: unknown, ...args: unknown[]) => {
      if (condition) return;
      // The Console spec's: a string message takes the prefix (its format specifiers still
      // apply); anything else follows it.
      if (typeof args[0] === "string") {
        args[0] = "Assertion failed: " + args[0];
        emit("error", args);
        return;
      }
      // Without a prototype: an index setter a guest put on Array.prototype would swallow the writes.
      const all = setPrototypeOf(["Assertion failed"], null) as unknown[];
      for (let i = 0; i < args.length; i++) all[i + 1] = args[i];
      emit("error", all);
    },
    true,
  );
  define(g, "console", consoleObject);

  // ---- FinalizationRegistry ------------------------------------------------------------------
  // A cleanup callback runs when the collector decides, in whatever call is running then: call
  // 1's registrations were cleaned up during call 2, their logs (call 1's data) and host calls
  // counted as call 2's (found by a red-team pass). So it always runs as a leftover (see
  // run.open): it may change the instance's state, but logs nothing, makes no host call, arms no
  // timer, and what it throws is dropped. The native constructor stays out of the guest's reach.
  const NativeRegistry = g.FinalizationRegistry as (new (cleanup: (held: unknown) => void) => object) | undefined;
  if (typeof NativeRegistry === "function") {
    const construct = Reflect.construct;
    const Registry = function (cleanup: unknown) {
      if (new.target === undefined) throw new TypeErrorCtor("Constructor FinalizationRegistry requires 'new'");
      if (typeof cleanup !== "function") throw new TypeErrorCtor("FinalizationRegistry: cleanup must be callable");
      const asLeftover = (held: unknown) => {
        const open = run.open;
        run.open = false;
        try {
          apply(cleanup, undefined, [held]);
        } catch {
        } finally {
          run.open = open;
        }
      };
      return construct(NativeRegistry, [asLeftover], new.target);
    };
    defineProperty(Registry, "name", { value: "FinalizationRegistry", configurable: true });
    defineProperty(Registry, "prototype", { value: NativeRegistry.prototype });
    define(NativeRegistry.prototype, "constructor", Registry);
    define(g, "FinalizationRegistry", Registry);
  }

  // ---- timers ----------------------------------------------------------------------------------
  function arm(fn: unknown, ms: unknown, args: unknown[], repeat: boolean): number {
    if (typeof fn !== "function") throw new TypeErrorCtor("the callback must be a function (strings are not evaluated)");
    if (timers.size >= config.maxTimers) {
      throw new RangeErrorCtor("too many pending timers (limit " + config.maxTimers + ")");
    }
    // Past the longest delay a timer takes, 1 ms, as Node and browsers do (clamped to the
    // longest, such a timer never fired within any run).
    const asked = NumberCtor(ms) || 0;
    const delay = asked > config.maxTimerMs ? 1 : mathMax(0, asked);
    const id = ++timerSeq;
    // A leftover's timer is never armed: the id is still returned, so clearTimeout(id) is harmless.
    if (!run.open) return id;
    timers.set(id, { fn: fn as (...a: unknown[]) => unknown, args, ms: delay, repeat, owner: run.index });
    host.timer(id, delay);
    return id;
  }
  function cancel(id: unknown): void {
    // Tell the host too, so cleared timers never pile up as host handles.
    const timerId = NumberCtor(id);
    if (timers.delete(timerId)) host.timer(timerId, -1);
  }
  defineNamed(g, "setTimeout", (fn: unknown, ms?: unknown, ...args: unknown[]) => arm(fn, ms, args, false));
  defineNamed(g, "setInterval", (fn: unknown, ms?: unknown, ...args: unknown[]) => arm(fn, ms, args, true));
  defineNamed(g, "clearTimeout", (id: unknown) => cancel(id));
  defineNamed(g, "clearInterval", (id: unknown) => cancel(id));
  defineNamed(g, "queueMicrotask", (fn: unknown) => {
    if (typeof fn !== "function") throw new TypeErrorCtor("queueMicrotask needs a function");
    thenOf(PromiseResolve(), () => (fn as () => void)());
  });

  // ---- modules, entry and call ------------------------------------------------------------------
  /** What the latest `call` returned (see GuestInternals.recover). */
  let lastCall: string | undefined;
  /**
   * The latest `call`'s outcomes when some were still to come: `text` joins those made, `next`
   * is the index of the first to come, `size` how many the crossing has. A serving task gathers
   * them (GuestInternals.gather) instead of their crossing through host.done.
   */
  let lastLate: PendingOutcomes | undefined;
  let gathering: PendingOutcomes | undefined;
  define(g, "__cordon_module", (specifier: string) => modules[specifier]);

  /** Outcomes are one string: a kind letter, then the encoded payload (o = ok, t = thrown, f = failed, m = missing). */
  /** The outcome of the codec's own refusal to encode the result; anything else the guest threw is a throw. */
  function failure(error: unknown): string | undefined {
    if (!codec.threw(error)) return undefined;
    const code = (error as { code?: unknown }).code;
    if (code === "ERR_NOT_SERIALIZABLE" || code === "ERR_OUTPUT_TOO_LARGE" || code === "ERR_MEMORY_LIMIT")
      return refusalOutcome(error);
    return undefined;
  }

  /** The "f" outcome of one of the codec's own refusals: its code and message. */
  function refusalOutcome(error: unknown): string {
    const { code, message } = error as { code: unknown; message: unknown };
    return 'f{"code":' + stringify(StringCtor(code)) + ',"message":' + stringify(StringCtor(message)) + "}";
  }

  /** One of the codec's copy refusals (Codec.limitCopies), known by identity at any later time. */
  function refusedCopy(error: unknown): boolean {
    return codec.refused(error) && (error as { code?: unknown }).code === "ERR_MEMORY_LIMIT";
  }

  /**
   * The engine's stack ran out while the codec walked the value: QuickJS's ends near 450 levels,
   * before the codec's own limit of 512 that v8 reaches. Not serializable there either, not the
   * guest's throw. The codec says it was deep when the error left it: a getter's RangeError with
   * the same message near the top was taken for this, and hid the guest's error.
   */
  function tooDeep(error: unknown): string | undefined {
    if (!codec.overflowed(error)) return undefined;
    try {
      const { name, message } = error as Error;
      const overflow =
        (name === "InternalError" && message === "stack overflow") ||
        (name === "RangeError" && message === "Maximum call stack size exceeded");
      if (overflow) return 'f{"code":"ERR_NOT_SERIALIZABLE","message":"value is nested too deeply to encode"}';
    } catch {}
    return undefined;
  }

  function encodeOutcome(value: unknown, ns: Record<string, unknown> | undefined): string {
    let budget = run.maxOutputChars;
    let valueText: string;
    try {
      valueText = codec.encode(value, "value", budget);
    } catch (error) {
      const failed = failure(error) ?? tooDeep(error);
      if (failed) return failed;
      throw error;
    }
    // A call's outcome has no namespace to list: the value alone ("v"), before the exports'
    // machinery (in QuickJS's interpreter every closure and call of it costs, per call). The
    // host then parses no wrapper either: v8 calls 64 in flight, JSON.parse was 9.5% of its thread.
    if (!ns) return "v" + valueText;
    budget -= valueText.length;
    let exportsText = "";
    // Built as text, not with JSON.stringify or array methods: the guest may have replaced those.
    let skipped = "";
    const skip = (key: string) => {
      skipped += (skipped ? "," : "") + stringify(StringCtor(key));
    };
    if (ns) {
      // Indexed: `for…of` runs the guest-replaceable array iterator.
      const keys = ownKeys(ns);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (key === "default") continue;
        let item: unknown;
        try {
          item = ns[key];
        } catch {
          skip(key);
          continue;
        }
        if (typeof item === "function") {
          skip(key);
          continue;
        }
        try {
          // Continuing the value's crossing: the host reads value and exports as one.
          const text = codec.encode(item, "exports." + key, budget, true, true);
          budget -= text.length;
          exportsText += (exportsText ? "," : "") + stringify(key) + ":" + text;
        } catch (error) {
          // Over the output limit, or too large to copy within the memory limit: the run fails
          // with the codec's code (skipped, a 20 MB export vanished from a run at memoryMb 32 and
          // failed it at 128). Anything else (not data, or a getter inside the export that threw)
          // skips the export, as a throwing getter on the namespace does: the module evaluated.
          const code = codec.threw(error) ? (error as { code?: unknown }).code : undefined;
          if (code === "ERR_OUTPUT_TOO_LARGE" || code === "ERR_MEMORY_LIMIT") return failure(error) as string;
          skip(key);
        }
      }
    }
    return 'o{"v":' + valueText + ',"x":{' + exportsText + '},"k":[' + skipped + "]}";
  }

  async function outcomeOf(work: () => unknown, ns: Record<string, unknown> | undefined): Promise<string> {
    try {
      const value = await work();
      const reading = readResultBodies(value);
      if (reading && !(await reading)) return bodyTooLarge();
      return encodeOutcome(value, ns);
    } catch (error) {
      return thrownOutcome(error);
    }
  }

  /**
   * Buffer the bodies a result holds (streamed ones: deno), each refused past the run's output
   * cap as it arrives: an endless body would otherwise grow until the memory limit ended the run.
   */
  function readResultBodies(value: unknown): Promise<boolean> | undefined {
    return readBodies?.([value], run.maxOutputChars);
  }

  function bodyTooLarge(): string {
    const message = "value's body is larger than the limit of " + run.maxOutputChars + " bytes";
    return 'f{"code":"ERR_OUTPUT_TOO_LARGE","message":' + stringify(message) + "}";
  }

  /** A thrown value that is no Error, as the host shows one (core/guest-errors.ts): its encoding, at most 2000 characters. */
  function shownThrow(value: unknown): string {
    try {
      return trimStartOf(codec.encode(value, "thrown", 2000));
    } catch {
      return typeof value;
    }
  }

  function encodeSafely(value: unknown): string {
    try {
      return encodeOutcome(value, undefined);
    } catch (error) {
      return thrownOutcome(error);
    }
  }

  /**
   * The outcome of a throw. The lenient encoder can itself throw on a hostile value (a Proxy
   * whose traps throw, a getter on an AggregateError's item): such a throw is still reported, as
   * an error that says its value could not be read, never left without an outcome.
   */
  function thrownOutcome(error: unknown): string {
    // The codec's own refusal of a copy the instance's memory cannot hold, left uncaught (maybe
    // after other encodings): the run's ERR_MEMORY_LIMIT. A guest's look-alike is a throw.
    if (refusedCopy(error)) return refusalOutcome(error);
    try {
      // Within the output limit, as a value is: unbounded, a thrown 150 MB string was copied
      // whole into the guest's heap and the host's before the host refused it.
      return "t" + codec.encodeError(error, true, run.maxOutputChars);
    } catch (encoding) {
      if (codec.threw(encoding) && (encoding as { code?: unknown }).code === "ERR_OUTPUT_TOO_LARGE") {
        const message = "the error the guest threw is larger than the limit of " + run.maxOutputChars + " bytes";
        return 'f{"code":"ERR_OUTPUT_TOO_LARGE","message":' + stringify(message) + "}";
      }
      if (refusedCopy(encoding)) return refusalOutcome(encoding);
      return 't{"$":"e","n":"Error","m":"Uncaught exception (the thrown value could not be read)"}';
    }
  }

  function isThenable(value: unknown): boolean {
    return (
      value !== null &&
      (typeof value === "object" || typeof value === "function") &&
      typeof (value as { then?: unknown }).then === "function"
    );
  }

  function resolvePath(root: unknown, path: string): { target: unknown; owner: unknown } {
    let owner: unknown;
    let target: unknown = root;
    const parts = split(path, ".");
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i];
      // The first name must be an export (an own property: a script-form namespace inherits
      // Object.prototype, whose `constructor` is no export); after it, methods may be inherited.
      if (target === null || (typeof target !== "object" && typeof target !== "function"))
        return { target: undefined, owner: undefined };
      if (!(i === 0 ? hasOwn(target, part) : hasOwnOrInherited(target, part))) return { target: undefined, owner: undefined };
      owner = target;
      target = (target as Record<string, unknown>)[part];
    }
    return { target, owner };
  }

  function begin(
    mode: string,
    inputText: string,
    maxOutputChars: number,
    maxLogEntries: number,
    maxLogBytes: number,
    maxBridgeCallChars: number,
  ): void {
    run.mode = mode;
    run.inputText = inputText;
    run.maxOutputChars = maxOutputChars;
    run.maxLogEntries = maxLogEntries;
    run.maxLogBytes = maxLogBytes;
    run.maxBridgeCallChars = maxBridgeCallChars;
    run.logEntries = 0;
    run.logBytes = 0;
    run.entered = false;
    run.index = 0;
    run.quiet = false;
    run.open = true;
    // Nothing of an earlier run on this instance may fire into this one.
    timers.clear();
    pendingCalls.clear();
    pendingChars = 0;
  }

  function install(bindingsText: string): void {
    const bindings = parse(bindingsText) as { globals: Record<string, Desc>; modules: Record<string, Desc>; fetch?: number };
    // Host modules belong to the bindings being installed: none of an earlier run's stay.
    modules = create(null);
    // Indexed: `for…of` runs the guest-replaceable array iterator (install may follow guest code).
    const names = ownKeys(bindings.globals);
    for (let i = 0; i < names.length; i++) define(g, names[i], build(bindings.globals[names[i]]), true);
    const specifiers = ownKeys(bindings.modules);
    for (let i = 0; i < specifiers.length; i++) modules[specifiers[i]] = build(bindings.modules[specifiers[i]]);
    // No net capability, no fetch at all (an own `fetch` only: Object.prototype is the guest's).
    if (hasOwn(bindings, "fetch") && typeof bindings.fetch === "number") installFetch(bindings.fetch);
  }

  /** Does a serialized http(s) URL carry a user name or password (an "@" before its path)? */
  function hasCredentials(url: string): boolean {
    const start = indexOfIn(url, "//", 0);
    if (start < 0) return false;
    const end = indexOfIn(url, "/", start + 2);
    const at = indexOfIn(url, "@", start + 2);
    return at >= 0 && (end < 0 || at < end);
  }

  /**
   * The guest's fetch: a Request of the guest realm crosses to the host's egress (rules, address
   * checks, pinned connection), and its Response comes back. A refusal is a catchable TypeError,
   * and the run's logs record it.
   */
  function installFetch(fnId: number): void {
    const RequestCtor = g.Request as new (input: unknown, init?: unknown) => unknown;
    // The request's signal: init's, else that of a Request passed as input (fetch(request)).
    const signalGetter = getOwnPropDesc(RequestCtor.prototype, "signal")?.get;
    const signalOf = signalGetter === undefined ? undefined : (callOf.bind(signalGetter) as (request: unknown) => unknown);
    const urlGetter = getOwnPropDesc(RequestCtor.prototype, "url")?.get;
    const urlOf = urlGetter === undefined ? undefined : (callOf.bind(urlGetter) as (request: unknown) => unknown);
    const fetched = config.fetched;
    define(
      g,
      "fetch",
      async function fetch(input: unknown, init?: unknown) {
        const request = new RequestCtor(input, init);
        // Cordon's Request refuses a URL with credentials as it is made; Deno's own takes it, and
        // the host's decoder refused it as unreadable (ERR_NOT_SERIALIZABLE). Refused here as
        // cordon's Request and Node's fetch do: a plain TypeError.
        const url = urlOf?.(request);
        if (typeof url === "string" && hasCredentials(url)) {
          throw new TypeErrorCtor("Request cannot be constructed from a URL that includes credentials: " + url);
        }
        const signal = (signalOf?.(request) ?? undefined) as GuestSignal | undefined;
        if (signal?.aborted) throw signal.reason;
        try {
          if (bodyLength !== undefined) {
            const max = mathFloor(run.maxBridgeCallChars / perBodyByte);
            if (bodyLength(request) > max) {
              const refusal = new TypeErrorCtor(
                "egress refused: the request body is larger than maxRequestBytes (" + max + " bytes)",
              );
              define(refusal, "code", "ERR_CAPABILITY_DENIED", true);
              define(refusal, "check", "request-too-large", true);
              throw refusal;
            }
          }
          const call = hostCall(fnId, [request], signal);
          // An abort rejects the guest's promise at once, and the host ends the exchange.
          const response = !signal
            ? await call
            : await new PromiseCtor((resolve, reject) => {
                signal.addEventListener("abort", () => reject(signal.reason));
                thenOf(call, resolve, reject);
              });
          return fetched === undefined ? response : fetched(response);
        } catch (error) {
          if ((error as { code?: unknown } | null)?.code === "ERR_CAPABILITY_DENIED") {
            emit("warn", ["[cordon] fetch refused: " + StringCtor((error as Error).message)]);
          }
          throw error;
        }
      },
      true,
    );
  }

  /**
   * The evaluated guest module's exports: call the default export (run), call the export path
   * the input names (call), or keep them (prepare).
   */
  function entry(ns: Record<string, unknown>): void {
    // One-shot per run: the driver module (or runScript) calls this once the module has evaluated.
    if (run.entered) return;
    run.entered = true;
    if (run.mode === "prepare") {
      prefix = ns;
      // The value says what the default export is (readExports reports it), never the export
      // itself: a handler is not data, and its data is not encoded under prepare's budget.
      const kind = hasOwn(ns, "default") ? typeof ns.default : null;
      void thenOf(
        outcomeOf(() => kind, ns),
        reportOutcome,
      );
      return;
    }
    if (run.mode === "call") {
      // The host encoded { export, args } (decoded into own data properties: nothing inherited is read).
      const request = codec.decode(run.inputText) as { export: unknown; args: unknown[] };
      const path = StringCtor(request.export);
      const { target, owner } = resolvePath(ns, path);
      if (typeof target !== "function") {
        report("m", '{"path":' + stringify(path) + "}");
        return;
      }
      void thenOf(
        outcomeOf(() => apply(target as (...a: unknown[]) => unknown, owner, request.args), ns),
        reportOutcome,
      );
      return;
    }
    void thenOf(
      outcomeOf(() => {
        const main = ns.default;
        return typeof main === "function" ? main(codec.decode(run.inputText)) : main;
      }, ns),
      reportOutcome,
    );
  }

  /** A run's outcome to the host; a warm-up's goes nowhere (each report would be a host round trip). */
  function report(kind: string, text: string): void {
    // The run is over: nothing it armed may fire now (a fire already on its way finds nothing),
    // and nothing may arm more.
    timers.clear();
    run.open = false;
    // Only the entry reports, and only for a run: its outcome is call 0's, said, never implied.
    if (!run.quiet) host.done(kind, text, 0);
  }

  /** An outcome's text is its kind (one letter), then what the kind carries. */
  function reportOutcome(outcome: string): void {
    report(outcome[0], sliceOf(outcome, 1));
  }

  /**
   * The filename with its line terminators made "_", for a sourceURL comment. No RegExp: its
   * methods are the guest's to replace, and what one returned here was evaluated as code.
   */
  function sourceName(filename: string): string {
    let name = "";
    let from = 0;
    for (let i = 0; i < filename.length; i++) {
      const c = charCodeOf(filename, i);
      if (c !== 10 && c !== 13 && c !== 0x2028 && c !== 0x2029) continue;
      name += sliceOf(filename, from, i) + "_";
      from = i + 1;
    }
    return from === 0 ? filename : name + sliceOf(filename, from);
  }

  /** Evaluate a guest module in script form (see GuestSource.script) and hand its exports to the entry. */
  function runScript(code: string, filename: string): void {
    const name = sourceName(filename);
    let factory: (h: typeof helpers) => Record<string, unknown>;
    try {
      factory = indirectEval(code + "\n//# sourceURL=" + name) as typeof factory;
    } catch (error) {
      // Evaluating the script form only makes its function, so a SyntaxError here is the engine
      // refusing to parse what esbuild passed (decorators, a regexp's duplicate group names):
      // the module does not parse, ERR_COMPILE, as a module-form module's compile says.
      if (!inherits(SyntaxErrorProto, error)) throw error;
      const message = (error as Error).message;
      // Joined, not an object literal stringified: a toJSON a guest of this warm instance put on
      // Object.prototype would write the outcome (a limit's code the host keeps).
      const text = filename + ": " + (typeof message === "string" ? message : "");
      reportOutcome('f{"code":"ERR_COMPILE","message":' + stringify(text) + "}");
      return;
    }
    entry(factory(helpers));
  }

  /** How a run on an instance starts: its bindings installed (unless null), its state begun. */
  function start(
    bindingsText: HostText | null,
    mode: string,
    inputText: HostText,
    maxOutputChars: number,
    maxLogEntries: number,
    maxLogBytes: number,
    maxBridgeCallChars: number,
  ): void {
    const bindings = hostTextOrNull(bindingsText);
    if (bindings !== null) install(bindings);
    begin(mode, hostText(inputText), maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars);
  }

  return {
    helpers,
    begin(mode, inputText, maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars) {
      begin(mode, hostText(inputText), maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars);
    },
    install(bindingsText) {
      install(hostText(bindingsText));
    },
    runScript(bindingsText, mode, inputText, maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars, code, filename) {
      start(bindingsText, mode, inputText, maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars);
      try {
        runScript(hostText(code), filename);
      } catch (error) {
        // A value that is no Error, thrown while the module evaluates, is reported here: past the
        // crossing isolated-vm replaces it with a message of its own ("An object was thrown from
        // supplied code within isolated-vm…") and the value is lost. Errors cross as before.
        if (isError(error)) throw error;
        reportOutcome(thrownOutcome(error));
      }
    },
    runFactory(factory, bindingsText, mode, inputText, maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars) {
      start(bindingsText, mode, inputText, maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars);
      let exports: Record<string, unknown>;
      try {
        exports = factory(helpers);
      } catch (error) {
        // As runScript: a value that is no Error is reported as a call's throw is (its encoding,
        // bounded by the output limit), not copied out whole by the QuickJS worker.
        if (isError(error)) throw error;
        reportOutcome(thrownOutcome(error));
        return;
      }
      entry(exports);
    },
    start,
    settle(callId, ok, text) {
      const pending = pendingCalls.get(callId);
      if (!pending) return;
      pendingCalls.delete(callId);
      pendingChars -= pending.chars;
      if (ok) pending.resolve(codec.decode(hostText(text)));
      else pending.reject(codec.decode(hostText(text)));
    },
    fire(timerId) {
      const timer = timers.get(timerId);
      if (!timer) return;
      if (timer.repeat) host.timer(timerId, timer.ms);
      else timers.delete(timerId);
      try {
        apply(timer.fn, undefined, timer.args);
      } catch (error) {
        // What a timer throws fails the run through the crossing. Past it isolated-vm replaces
        // an object that is no Error with a text of its own ("An object was thrown…"): an Error
        // that names the value crosses instead, as the host names one a call threw.
        if (isError(error)) throw error;
        throw new ErrorCtor("Uncaught " + shownThrow(error));
      }
    },
    entry,
    call(path, joinedArgs, maxOutputChars, maxLogEntries, maxLogBytes, maxBridgeCallChars) {
      lastCall = undefined;
      lastLate = undefined;
      gathering = undefined;
      if (maxOutputChars !== undefined)
        begin("run", '{"$":"u"}', maxOutputChars, maxLogEntries as number, maxLogBytes as number, maxBridgeCallChars as number);
      else begin("run", '{"$":"u"}', run.maxOutputChars, run.maxLogEntries, run.maxLogBytes, run.maxBridgeCallChars);
      // The entry is the driver's, once per evaluation: a call is none, and one that called
      // __cordon_entry by hand reported a run's outcome, as call 0 of the crossing.
      run.entered = true;
      const argsTexts = split(hostText(joinedArgs), "\u0001");
      const { target, owner } = resolvePath(prefix, path);
      let out = "";
      /** This crossing's outcomes still to come, once it has some (see lastLate). */
      let mine: PendingOutcomes | undefined;
      // Calls run one after another; a call whose result is a promise is awaited before the next
      // starts, so logs and host calls are always attributed to the call that made them. Outcomes
      // of calls finished synchronously are returned at once; the rest arrive through host.done
      // (or are gathered by the serving task that took the call: `late`).
      const runFrom = (start: number, sync: boolean): void => {
        for (let i = start; i < argsTexts.length; i++) {
          run.index = i;
          run.open = true;
          run.logEntries = 0;
          run.logBytes = 0;
          let outcome: string;
          if (typeof target !== "function") {
            outcome = 'm{"path":' + stringify(StringCtor(path)) + "}";
          } else {
            let result: unknown;
            try {
              result = apply(target as (...a: unknown[]) => unknown, owner, codec.decode(argsTexts[i]) as unknown[]);
            } catch (error) {
              result = undefined;
              outcome = thrownOutcome(error);
              deliver(i, outcome, sync);
              continue;
            }
            // A Response whose body must be read first is settled like a promise. A `then`
            // getter (or a promise's `constructor`) that throws is this call's throw: escaping
            // here, it failed every call of the crossing that had no outcome yet.
            let thenable: boolean;
            let reading: Promise<boolean> | undefined;
            try {
              thenable = isThenable(result);
              reading = thenable ? undefined : readResultBodies(result);
            } catch (error) {
              deliver(i, thrownOutcome(error), sync);
              continue;
            }
            if (thenable || reading) {
              const index = i;
              // The callbacks return nothing: a promise returned from one would be resolved
              // through its (guest-replaceable) `then`, which would receive the outcome's text.
              const settle = (settled: string) => {
                run.index = index;
                ended(index);
                late(settled, index);
                runFrom(index + 1, false);
              };
              const failed = (error: unknown) => settle(thrownOutcome(error));
              const settleValue = (value: unknown, reading: Promise<boolean> | undefined) => {
                if (!reading) settle(encodeSafely(value));
                else thenOf(reading, (read) => settle(read ? encodeSafely(value) : bodyTooLarge()), failed);
              };
              // What the promise resolved to is read as a result is: a throw there is the call's.
              const resolved = (value: unknown) => {
                let later: Promise<boolean> | undefined;
                try {
                  later = readResultBodies(value);
                } catch (error) {
                  return failed(error);
                }
                settleValue(value, later);
              };
              try {
                if (reading) settleValue(result, reading);
                else thenOf(PromiseResolve(result), resolved, failed);
              } catch (error) {
                // Nothing was chained (PromiseResolve and `then` read the constructor first).
                deliver(i, thrownOutcome(error), sync);
                continue;
              }
              if (sync) {
                mine = { text: out, next: i, size: argsTexts.length };
                lastLate = mine;
                for (let j = i; j < argsTexts.length; j++) out += j ? "\u0001p" : "p";
              }
              return;
            }
            outcome = encodeSafely(result);
          }
          deliver(i, outcome, sync);
        }
      };
      // A call's timers end with it, here and not only when the host settles it: a fire the
      // host sent before it read the outcome would run them after the call, outside every limit
      // (a spinning one held a warm instance's thread for good), and in a crossing of several
      // calls they fired during later calls, as theirs.
      const ended = (i: number) => {
        if (run.index === i) run.open = false;
        if (timers.size === 0) return;
        const ids = timers.idsWhere((timer) => timer.owner === i);
        for (let k = 0; k < ids.length; k++) cancel(ids[k]);
      };
      const deliver = (i: number, outcome: string, sync: boolean) => {
        ended(i);
        if (sync) out += (i ? "\u0001" : "") + outcome;
        else late(outcome, i);
      };
      // An outcome made after the call returned: to the serving task gathering them, else the host.
      const late = (outcome: string, i: number) => {
        if (mine !== undefined && gathering === mine && mine.next === i) {
          mine.text += (i ? "\u0001" : "") + outcome;
          mine.next = i + 1;
        } else host.done(outcome[0], sliceOf(outcome, 1), i);
      };
      runFrom(0, true);
      lastCall = out;
      return out;
    },
    gather() {
      gathering = lastLate;
      lastLate = undefined;
      return gathering !== undefined;
    },
    gathered(final) {
      const late = gathering;
      if (late === undefined || (late.next < late.size && !final)) return undefined;
      gathering = undefined;
      let text = late.text;
      for (let j = late.next; j < late.size; j++) text += j ? "\u0001p" : "p";
      return text;
    },
    waitsOnHost() {
      return pendingCalls.size > 0 || timers.size > 0;
    },
    recover() {
      const out = lastCall;
      lastCall = undefined;
      return out;
    },
    warmUp(modulesJson) {
      const modules = parse(modulesJson) as { code: string; inputText: string; filename: string }[];
      for (let i = 0; i < modules.length; i++) {
        begin("run", modules[i].inputText, 1024, 10, 1024, 1024);
        run.quiet = true;
        runScript(modules[i].code, modules[i].filename);
      }
    },
    ping() {
      return true;
    },
    sourceName,
    limitCopies(chars) {
      codec.limitCopies(chars);
    },
  };

  function hasOwnOrInherited(target: object, key: string): boolean {
    return hasOwn(target, key) || key in target;
  }
}
