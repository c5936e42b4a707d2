/**
 * The Deno side of the deno engine: the code a Deno process runs before any guest code.
 *
 * SELF-CONTAINED: `denoGuestMain.toString()` is written into a script with the codec, the log
 * formatter, the fetch wire and the guest runtime (each stringified, as the other engines inject
 * them), so the guest runs exactly the code the host's tests exercise. The script is evaluated
 * with `//# sourceURL=<cordon>`, so runtime frames never name a host path.
 *
 * It reads length-prefixed JSON frames from a FIFO (`input`; host-call answers come as text
 * frames, core/framing.ts) and writes frames to another (`output`); guest console output is
 * captured by the runtime and crosses as "log" frames, never as bytes on stdout.
 */
import type { Codec } from "../../core/codec.js";
import type { FetchWire } from "../../core/fetch-wire.js";
import type { FormatLogArgs } from "../guest/inspect.js";
import type { GuestHostCallbacks, GuestInternals, GuestRuntimeConfig } from "../guest/runtime.js";
import type { PendingWatch } from "./pending.js";
import type { GlobalReset } from "./reset.js";

export interface DenoGuestConfig {
  maxTimers: number;
  maxTimerMs: number;
  maxPendingCalls: number;
  pendingArgsFactor: number;
  /** The guest's memory limit: one ArrayBuffer allocation past it throws a RangeError. */
  memoryBytes: number;
  /**
   * The FIFO the host's frames arrive on (process.ts): opened, and its read permission revoked,
   * before any guest code runs.
   */
  input: string;
  /** The FIFO the process's frames leave on: the same, for writing. */
  output: string;
  /** Node builtins loaded before the globals they read at load time are removed. */
  nodeBuiltins: string[];
  /** The field names a text frame's field index points into (core/framing.ts). */
  textFields: string[];
}

export interface DenoGuestParts {
  createCodec(): Codec;
  createInspect(): FormatLogArgs;
  createFetchWire(): FetchWire;
  installRuntime(host: GuestHostCallbacks, codec: Codec, format: FormatLogArgs, config: GuestRuntimeConfig): GuestInternals;
  createReset(global: object): GlobalReset;
  createPendingWatch(core: unknown): PendingWatch;
  /** `import()`, written as text in the script: a bundler or test runner rewrites it in source. */
  importModule(specifier: string): Promise<Record<string, unknown>>;
}

// biome-ignore lint/suspicious/noExplicitAny: the Deno namespace has no types here.
type Any = any;

export function denoGuestMain(parts: DenoGuestParts, configText: string): void {
  const g = globalThis as Any;
  const D = g.Deno as Any;
  const config = JSON.parse(configText) as DenoGuestConfig;
  // What a run left pending (pending.ts), watched with Deno's core as it is before guest code.
  const leftovers = parts.createPendingWatch(D[D.internal]?.core);
  // Everything the bootstrap uses is captured before guest code can replace it.
  const memoryUsage = D.memoryUsage as () => { heapUsed: number; external: number };
  const exit = D.exit as (code: number) => never;
  const removeSync = D.removeSync as (path: string, options: { recursive: boolean }) => void;
  const privateDir = D.cwd() as string;
  const U8 = Uint8Array;
  const ArrayBufferCtor = ArrayBuffer;
  const DataViewCtor = DataView;
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const ReflectConstruct = Reflect.construct;
  const ReflectOwnKeys = Reflect.ownKeys;
  const getOwnDesc = Object.getOwnPropertyDescriptor;
  const defineProperty = Object.defineProperty;
  const deleteProperty = Reflect.deleteProperty;
  const RangeErrorCtor = RangeError;
  const TypeErrorCtor = TypeError;
  const ProxyCtor = Proxy;
  const PromiseCtor = Promise;
  const setPrototypeOf = Object.setPrototypeOf;
  const collect = g.gc as (() => void) | undefined;
  // --expose-gc makes it a non-configurable global: deleted where it can be, else emptied (it is
  // writable), so only the bootstrap holds it.
  if (!deleteProperty(g, "gc")) g.gc = undefined;

  // Typed-array and DataView methods too: a guest that replaced Uint8Array.prototype.subarray
  // made every frame's write loop spin (writeSync got what the guest returned).
  const FunctionProto = Function.prototype;
  const callOf = FunctionProto.call;
  // Views are made with `new`, never `subarray`: subarray reads a species the guest can replace.
  const setIn = callOf.bind(U8.prototype.set) as unknown as (target: Uint8Array, source: Uint8Array, offset: number) => void;
  const setUint32 = callOf.bind(DataViewCtor.prototype.setUint32) as unknown as (
    view: DataView,
    at: number,
    value: number,
  ) => void;
  const getUint32 = callOf.bind(DataViewCtor.prototype.getUint32) as unknown as (view: DataView, at: number) => number;
  const typedGetter = (name: string) =>
    callOf.bind((getOwnDesc(Object.getPrototypeOf(U8.prototype), name) as PropertyDescriptor).get as () => unknown);
  const lengthOf = typedGetter("length") as unknown as (bytes: Uint8Array) => number;
  const bufferOf = typedGetter("buffer") as unknown as (bytes: Uint8Array) => ArrayBuffer;
  const offsetOf = typedGetter("byteOffset") as unknown as (bytes: Uint8Array) => number;
  const promiseThen = callOf.bind(PromiseCtor.prototype.then) as unknown as (
    promise: Promise<unknown>,
    onValue: ((value: Any) => void) | undefined,
    onError: (error: unknown) => void,
  ) => void;
  const startsWith = callOf.bind(String.prototype.startsWith) as unknown as (text: string, prefix: string) => boolean;
  const indexOf = callOf.bind(String.prototype.indexOf) as unknown as (text: string, part: string, from: number) => number;
  const encode = encoder.encode.bind(encoder);
  const decode = decoder.decode.bind(decoder);
  // The process's frames: see start().
  let writeSync!: (bytes: Uint8Array) => number;
  // The host's frames: see start().
  let read!: (into: Uint8Array) => Promise<number | null>;
  const ownKeys = Object.keys;

  /** The host's key for this process (process.ts), from the first frame after "ready": every frame after carries it. */
  let key: string | undefined;

  /**
   * Frames are built from primitives only: JSON.stringify of an object would consult a toJSON
   * the guest put on Object.prototype, and forge the frame.
   */
  function send(message: Record<string, string | number | boolean | null | undefined>): void {
    let text = "";
    // Indexed: `for…of` runs the guest-replaceable array iterator.
    const keys = ownKeys(message);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      const value = message[key];
      if (value === undefined) continue;
      text += `${text ? "," : "{"}${stringify(key)}:${stringify(value)}`;
    }
    if (key !== undefined) text += `${text ? "," : "{"}"k":${stringify(key)}`;
    const body = encode(`${text}}`);
    const size = lengthOf(body);
    const buffer = new ArrayBufferCtor(4 + size);
    const frame = new U8(buffer);
    setUint32(new DataViewCtor(buffer), 0, size);
    setIn(frame, body, 4);
    let written = 0;
    while (written < 4 + size) {
      const wrote = writeSync(written === 0 ? frame : new U8(buffer, written));
      // A write that makes no progress ends the process: the host reads that as its loss.
      if (!(wrote > 0)) exit(70);
      written += wrote;
    }
  }

  /**
   * Buffer the bodies among `values`; false when one passed `maxBytes` (it is refused as it
   * arrives, and the others still being read are cancelled with it).
   */
  async function readBodiesWithin(values: unknown[], maxBytes: number | undefined): Promise<boolean> {
    if (maxBytes === undefined) {
      await wire.readBodies(values);
      return true;
    }
    const controller = new AbortController();
    const bounds = { signal: controller.signal, maxBytes, exceeded: false };
    try {
      await wire.readBodies(values, bounds);
      return true;
    } catch (error) {
      controller.abort();
      if (bounds.exceeded) return false;
      throw error;
    }
  }

  /** The run or call being served (the host numbers them): every frame about it names it. */
  let work: number | undefined;
  const codec = parts.createCodec();
  const wire = parts.createFetchWire();
  codec.extend(wire.extension);
  // Each names the run or call it is sent in: the host drops what comes from earlier work.
  const host: GuestHostCallbacks = {
    log: (level, message, index) => send({ t: "log", work, level, message, index }),
    call: (callId, fnId, argsText) => send({ t: "call", work, callId, fnId, argsText }),
    timer: (timerId, ms) => send({ t: "timer", work, timerId, ms }),
    done: (kind, text, index) => send({ t: "done", work, kind, text, index }),
  };
  const internals = parts.installRuntime(host, codec, parts.createInspect(), {
    maxTimers: config.maxTimers,
    maxTimerMs: config.maxTimerMs,
    maxPendingCalls: config.maxPendingCalls,
    pendingArgsFactor: config.pendingArgsFactor,
    readBodies: (values, maxBytes) => (wire.needsBodies(values) ? readBodiesWithin(values, maxBytes) : undefined),
  });
  defineProperty(g, "__cordon_entry", { value: internals.entry, writable: false, configurable: false, enumerable: false });

  // ---- memory: one allocation past the limit is a RangeError, as V8 reports a failed one --------
  const LARGE = 1 << 20;
  function checkAllocation(bytes: number): void {
    if (!(bytes >= LARGE)) return;
    const used = () => {
      const m = memoryUsage();
      return m.heapUsed + m.external;
    };
    if (bytes + used() <= config.memoryBytes) return;
    collect?.();
    if (bytes + used() > config.memoryBytes) throw new RangeErrorCtor("Array buffer allocation failed");
  }
  function guardAllocations(name: string, bytesOf: (args: unknown[], Ctor: Any) => number): void {
    const Ctor = g[name];
    if (typeof Ctor !== "function") return;
    const guarded: Any = new ProxyCtor(Ctor, {
      construct(target: Any, args: unknown[], newTarget: Any): Any {
        checkAllocation(bytesOf(args, target));
        return ReflectConstruct(target, args, newTarget === guarded ? target : newTarget);
      },
    });
    defineProperty(Ctor.prototype, "constructor", { value: guarded, writable: true, configurable: true, enumerable: false });
    defineProperty(g, name, { value: guarded, writable: true, configurable: true, enumerable: false });
  }

  /**
   * Deno answers these without a permission: the host process's pid (ppid), the bootstrap's path
   * in the shared temporary directory (mainModule, process.argv[1]) and this configuration (args,
   * process.argv[2]). The guest sees neutral values instead.
   */
  async function hideHostFacts(): Promise<void> {
    const getter = (value: unknown) => ({ get: () => value, configurable: true, enumerable: true });
    defineProperty(D, "ppid", getter(1));
    defineProperty(D, "mainModule", getter("file:///main.js"));
    defineProperty(D, "args", { get: () => [], configurable: true, enumerable: true });
    // process.ppid reads Deno.ppid; process.argv was copied from Deno.args when node:process loaded.
    const nodeProcess = ((await parts.importModule("node:process").catch(() => undefined)) as Any)?.default;
    if (nodeProcess) {
      nodeProcess.argv = ["deno", "/main.js"];
      // Signals to itself: SIGSTOP froze its CPU clock (only the wall time ended it), an abort
      // after printing "out of memory" passed for a memory limit. Other pids need run access.
      nodeProcess.kill = refuseSignals("process.kill");
      nodeProcess.abort = refuseSignals("process.abort");
    }
  }

  function refuseSignals(name: string) {
    return function refused() {
      // The error Deno's own permission checks throw (NotCapable since Deno 2).
      throw new (D.errors.NotCapable ?? D.errors.PermissionDenied)(`${name} is not available in cordon's sandbox (no signals)`);
    };
  }
  defineProperty(D, "kill", { value: refuseSignals("Deno.kill"), writable: true, configurable: true, enumerable: true });

  // Deno.resolveDns asks for net access to the host's nameserver, and its refusal named it
  // ("Requires net access to \"10.255.255.53:53\""): the host's resolv.conf, which the guest cannot
  // read. A guest reaches the network through fetch only; its DNS is the host's egress.
  defineProperty(D, "resolveDns", {
    value: async function resolveDns() {
      throw new (D.errors.NotCapable ?? D.errors.PermissionDenied)(
        "Deno.resolveDns is not available in cordon's sandbox (fetch resolves names through the host's egress)",
      );
    },
    writable: true,
    configurable: true,
    enumerable: true,
  });

  // Deno answers execPath without a permission: it would name the host's install path of the
  // binary. Node compatibility reads it too (process.execPath), so it answers a bare name.
  defineProperty(D, "execPath", {
    value: function execPath() {
      return "deno";
    },
    writable: true,
    configurable: true,
    enumerable: true,
  });

  // ---- Deno.serve: the handler is captured, no socket is opened -----------------------------------
  let served: ((...args: unknown[]) => unknown) | undefined;
  defineProperty(D, "serve", {
    value: function serve(a: Any, b: Any) {
      const handler = typeof a === "function" ? a : typeof b === "function" ? b : (a?.handler ?? b?.handler);
      if (typeof handler !== "function") throw new TypeErrorCtor("Deno.serve needs a handler function");
      served = handler;
      return {
        finished: new PromiseCtor(() => {}),
        shutdown: async () => {},
        ref() {},
        unref() {},
        addr: { transport: "tcp", hostname: "0.0.0.0", port: 0 },
      };
    },
    writable: true,
    configurable: true,
    enumerable: true,
  });

  const failures = (reason: unknown) => send({ t: "threw", work, text: codec.encodeError(reason) });
  g.addEventListener("unhandledrejection", (event: Any) => {
    event.preventDefault();
    failures(event.reason);
  });
  g.addEventListener("error", (event: Any) => {
    event.preventDefault();
    failures(event.error);
  });

  const MISSING_ENTRY =
    "the module has no entry point; add `export default { fetch(request) { … } }`, `export default function (input) { … }`, or call `Deno.serve(handler)`";
  let hasEntry = false;

  const indirectEval = g.eval as (code: string) => unknown;

  /**
   * Load the guest module and hand its exports to the runtime's entry: a module without imports
   * in its script form (one eval, no file, named as the caller named it), any other as a file
   * imported under a URL of its own, so every run gets a fresh module instance.
   */
  async function evaluate(message: Any): Promise<void> {
    if (message.reset) {
      resetting = true;
      leftovers.track();
      // Reset (and its builtins checked) at the last ping too: what fails now was done since, by
      // what the last run left running. No guest code runs here again (ERR_INSTANCE_RESET).
      if (!globals.reset()) {
        send({ t: "dirty" });
        exit(70);
      }
    }
    served = undefined;
    const caps = message.caps as number[];
    const maxOutput = caps[0];
    const maxEntries = caps[1];
    const maxBytes = caps[2];
    const maxBridge = caps[3];
    if (message.bindingsText !== null)
      internals.start(message.bindingsText, message.mode, message.inputText, maxOutput, maxEntries, maxBytes, maxBridge);
    else internals.begin(message.mode, message.inputText, maxOutput, maxEntries, maxBytes, maxBridge);
    let ns: Record<string, unknown>;
    if (typeof message.script === "string") {
      try {
        // Not a RegExp replace: a guest's RegExp.prototype[Symbol.replace] could write code here.
        const name = internals.sourceName(message.filename);
        const factory = indirectEval(`${message.script}\n//# sourceURL=${name}`) as (h: unknown) => Record<string, unknown>;
        ns = factory(internals.helpers);
      } catch (error) {
        host.done("t", codec.encodeError(error), 0);
        return;
      }
    } else {
      try {
        ns = await parts.importModule(message.url);
      } catch (error) {
        const code = (error as { code?: unknown } | null)?.code;
        if (code === "ERR_MODULE_NOT_FOUND" || code === "ERR_UNSUPPORTED_ESM_URL_SCHEME") {
          send({ t: "threw", work, code: "ERR_MODULE_NOT_FOUND", message: String((error as Error).message) });
        } else host.done("t", codec.encodeError(error), 0);
        return;
      }
    }
    // `export default` wins; otherwise a handler given to Deno.serve answers calls of `default.fetch`
    // (a one-off run has no request to give it: its value stays the module's default, undefined).
    let entryNs = ns;
    if ((message.mode === "prepare" || message.mode === "call") && ns.default === undefined && served) {
      const handler = served;
      const view: Record<string, unknown> = {};
      const keys = ReflectOwnKeys(ns) as string[];
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        const field = { __proto__: null, get: () => ns[key], enumerable: true, configurable: true };
        if (key !== "default") defineProperty(view, key, field as PropertyDescriptor);
      }
      const entry = { __proto__: null, value: { fetch: handler }, enumerable: true, configurable: true };
      defineProperty(view, "default", entry as PropertyDescriptor);
      entryNs = view;
    }
    if (message.mode === "prepare") hasEntry = entryNs.default !== undefined;
    internals.entry(entryNs);
  }

  function call(message: Any): string {
    const path = message.path as string;
    if (!hasEntry && (path === "default" || startsWith(path, "default."))) {
      // One outcome per call in the batch; no array or object method (the guest's to replace).
      const missing = `m{"path":${stringify(path)},"hint":${stringify(MISSING_ENTRY)}}`;
      let outcomes = missing;
      for (let at = indexOf(message.joined, "\u0001", 0); at >= 0; at = indexOf(message.joined, "\u0001", at + 1)) {
        outcomes += `\u0001${missing}`;
      }
      return outcomes;
    }
    return message.caps
      ? internals.call(path, message.joined, message.caps[0], message.caps[1], message.caps[2], message.caps[3])
      : internals.call(path, message.joined);
  }

  function dispatch(message: Any): void {
    if (message.t === "evaluate" || message.t === "call") work = message.work;
    try {
      switch (message.t) {
        case "key":
          // Once: it arrives before any guest code, and nothing later replaces it.
          if (key === undefined && typeof message.key === "string") key = message.key;
          return;
        case "evaluate":
          whenSettled(evaluate(message), undefined, failures);
          return;
        case "call":
          send({ t: "reply", seq: message.seq, value: call(message) });
          return;
        case "settle":
          internals.settle(message.callId, message.ok, message.text);
          return;
        case "fire":
          internals.fire(message.timerId);
          return;
        case "ping":
          // The host pings once a run's result is out: a function's process is reset now, and
          // reported dirty (so retired) when the run changed what the next would use.
          // Also when work it started is still pending: it would run during the next caller's run.
          if (resetting && !(globals.reset() && globals.builtinsIntact() && !leftovers.pending())) send({ t: "dirty" });
          send({ t: "reply", seq: message.seq, value: true });
          return;
        case "heap":
          send({ t: "reply", seq: message.seq, value: memoryUsage().heapUsed });
          return;
      }
    } catch (error) {
      if (message.t === "call") send({ t: "reply", seq: message.seq, value: "" });
      failures(error);
    }
  }

  // ---- per-run reset of a function's process: nothing of one call's globals reaches the next ------
  const globals = parts.createReset(g);
  /** Set by the first run that asks for the reset: this process serves one function's runs. */
  let resetting = false;

  /** `then` without reading the promise's `constructor` (a species the guest may have replaced). */
  function whenSettled(
    promise: Promise<unknown>,
    onValue: ((value: Any) => void) | undefined,
    onError: (error: unknown) => void,
  ) {
    defineProperty(promise, "constructor", { __proto__: null, value: undefined } as PropertyDescriptor);
    promiseThen(promise, onValue, onError);
  }

  async function start(): Promise<void> {
    // First: the only reader of the host's frames and the only writer of the process's are these
    // files, and nothing can open them again. The guest's stdin is /dev/null, its stdout no frame.
    const input = await D.open(config.input, { read: true });
    const output = await D.open(config.output, { write: true });
    read = input.read.bind(input);
    writeSync = output.writeSync.bind(output);
    await D.permissions.revoke({ name: "read", path: config.input });
    await D.permissions.revoke({ name: "write", path: config.output });
    // Deno's Node compatibility reads some globals when a builtin first loads: load them all now.
    await PromiseCtor.all(config.nodeBuiltins.map((name) => parts.importModule(`node:${name}`).catch(() => undefined)));
    await hideHostFacts();
    // Deno's core (raw ops, its leak tracing) is the bootstrap's alone: a guest that turned the
    // tracing off around a node:timers interval left it running unseen for the next caller's run.
    deleteProperty(D, D.internal);
    for (const name of [
      "SharedArrayBuffer",
      "Atomics",
      "Worker",
      "WebAssembly",
      "fetch",
      "process",
      "Buffer",
      "global",
      "setImmediate",
      "clearImmediate",
      // Web storage lives in the cache directory every function shares: off (private-dir.ts
      // closes it for the realms node:vm makes too).
      "localStorage",
      "sessionStorage",
      "caches",
    ]) {
      deleteProperty(g, name);
    }
    guardAllocations("ArrayBuffer", (args) => Number(args[0]) || 0);
    for (const name of [
      "Int8Array",
      "Uint8Array",
      "Uint8ClampedArray",
      "Int16Array",
      "Uint16Array",
      "Int32Array",
      "Uint32Array",
      "Float16Array",
      "Float32Array",
      "Float64Array",
      "BigInt64Array",
      "BigUint64Array",
    ]) {
      guardAllocations(name, (args, Ctor) => (typeof args[0] === "number" ? args[0] * Ctor.BYTES_PER_ELEMENT : 0));
    }
    // Compile the runtime's paths and Deno's module loader now, not on a function's first call.
    await evaluate({
      reset: false,
      bindingsText: '{"globals":{},"modules":{}}',
      mode: "run",
      inputText: '{"$":"u"}',
      caps: [1 << 20, 10, 1 << 16, 1 << 20],
      script: '(function () { "use strict"; return { default: () => ({ warm: [new Date(0), new Map([[1, 2n]])] }) }; })',
      filename: "<warm-up>",
    });
    await parts.importModule("data:text/javascript,export default 1").catch(() => undefined);
    // What the reset keeps and checks: the globals now, and the builtins (reset.ts).
    // The preloaded node: modules' objects too (node:process, node:events…): a value one run puts
    // on them retires the process, as a changed builtin does.
    const nodeObjects: unknown[] = [];
    for (let i = 0; i < config.nodeBuiltins.length; i++) {
      const ns = (await parts.importModule(`node:${config.nodeBuiltins[i]}`).catch(() => undefined)) as Any;
      if (ns) nodeObjects[nodeObjects.length] = ns.default ?? ns;
    }
    globals.snapshot(nodeObjects, ((await parts.importModule("node:util")) as Any).types.isProxy);
    leftovers.snapshot();
    send({ t: "ready" });
    // Frames are read with captured functions only, and without `await` (which reads a species).
    /**
     * A text frame (core/framing.ts): `[0x01][field][4-byte header length][header JSON][text]`.
     * The host sends settles so; `field` indexes config.textFields.
     */
    const TEXT_TAIL = 0x01;
    const textFields = setPrototypeOf(config.textFields, null) as string[];
    const readTextFrame = (body: Uint8Array) => {
      const buffer = bufferOf(body);
      const at = offsetOf(body);
      const headerBytes = getUint32(new DataViewCtor(buffer, at + 2), 0);
      const message = parse(decode(new U8(buffer, at + 6, headerBytes)));
      // Before the text is set: a setter the guest put on Object.prototype must not take it.
      setPrototypeOf(message, null);
      message[textFields[body[1]]] = decode(new U8(buffer, at + 6 + headerBytes, lengthOf(body) - 6 - headerBytes));
      return message;
    };
    const dispatchBody = (body: Uint8Array) => {
      if (lengthOf(body) >= 6 && body[0] === TEXT_TAIL) return dispatch(readTextFrame(body));
      const message = parse(decode(body));
      // Fields a frame leaves out read as undefined, never as what the guest put on Object.prototype.
      setPrototypeOf(message, null);
      dispatch(message);
    };
    // Bytes past the last whole frame wait in `buffered` (under two chunks: a frame longer than a
    // chunk gets its own buffer, `long`, and the rest of it is read straight into place). Growing
    // one buffer per chunk copied a 2 MB answer 32 times: 80 ms of CPU each, and near the heap
    // limit each copy's allocation ran a full collection.
    const chunk = new U8(1 << 16);
    let buffered = new U8(0);
    let long: Uint8Array | undefined;
    let filled = 0;
    const takeFrames = () => {
      while (lengthOf(buffered) >= 4) {
        const buffer = bufferOf(buffered);
        const at = offsetOf(buffered);
        const length = getUint32(new DataViewCtor(buffer, at), 0);
        const have = lengthOf(buffered) - 4;
        if (have < length) {
          if (length > lengthOf(chunk)) {
            long = new U8(length);
            setIn(long, new U8(buffer, at + 4, have), 0);
            filled = have;
            buffered = new U8(0);
          }
          return;
        }
        buffered = new U8(buffer, at + 4 + length, have - length);
        dispatchBody(new U8(buffer, at + 4, length));
      }
    };
    const onRead = (n: number | null) => {
      if (n === null) {
        // Deno's own FsFile.read calls the live Function.prototype.call: replaced by the guest,
        // every read returns null. Say so (the run fails with the guest's error) before leaving.
        try {
          if (FunctionProto.call !== callOf) {
            failures(
              new TypeErrorCtor("Function.prototype.call was replaced: Deno's own I/O needs it, and this process cannot go on"),
            );
          }
        } catch {}
        // The host is gone (its end of the pipe closed): leave nothing behind in the temp directory.
        try {
          removeSync(privateDir, { recursive: true });
        } catch {}
        exit(0);
      }
      if (long !== undefined) {
        filled += n as number;
        if (filled === lengthOf(long)) {
          const body = long;
          long = undefined;
          dispatchBody(body);
        }
      } else {
        const size = lengthOf(buffered);
        const next = new U8(size + (n as number));
        setIn(next, buffered, 0);
        setIn(next, new U8(bufferOf(chunk), 0, n as number), size);
        buffered = next;
        takeFrames();
      }
      pump();
    };
    const pump = () =>
      whenSettled(
        leftovers.untracked(() => read(long === undefined ? chunk : new U8(bufferOf(long), filled, lengthOf(long) - filled))),
        onRead,
        () => onRead(null),
      );
    pump();
  }
  void start();
}
