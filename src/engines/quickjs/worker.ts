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
 * This file is the thread's entry and its message loop. Its parts are evaluated from their own
 * sources too, and get what they share (the instances, the post function) as arguments:
 * crossings in worker-crossing.ts, making and dropping instances in worker-instances.ts; what
 * needs none of that lives beside them (memory-snapshot.ts, seeded-random.ts).
 */
import type { ToWorker } from "./protocol.js";
import type { Instance, quickjsCrossings } from "./worker-crossing.js";
import type { QuickJSTemplate, quickjsInstances } from "./worker-instances.js";
import type { QuickJSWasm } from "./wasm-memory-minimum.js";

export interface QuickJSWorkerData {
  corePath: string;
  variantPath: string;
  /** The module's bytes, its memory's declared minimum lowered (wasm-memory-minimum.ts). */
  wasm: QuickJSWasm;
  runtimeScript: string;
  /** `createHostServices.toString()`: URL parsing and random bytes, the same code the v8 engine uses. */
  hostServicesSource: string;
  callbackNames: Record<"log" | "call" | "timer" | "done" | "parseUrl" | "setUrlPart" | "randomBytes", string>;
  /** QuickJS's own stack limit for guest code, in bytes. */
  stackBytes: number;
  /** After a request that came in a stream, the thread's loop turns this long for the next one (core/busy-poll.ts). */
  busyPollMs: number;
  /**
   * The warm-up runs for spares made ahead (engines/warm-up-modules.ts), when the host had them
   * as the thread started; else they come in a "warm-up" message (esbuild makes them, and its
   * start, ~160 ms, is not waited for: the thread starts and boots meanwhile).
   */
  warmUpModules?: string;
  /** `installSeededRandom.toString()`: each instance's Math.random, seeded from the host's CSPRNG. */
  seededRandomSource: string;
  /** `memorySnapshots.toString()`: copies of a booted instance's memory (memory-snapshot.ts). */
  memorySnapshotsSource: string;
  /** `quickjsCrossings.toString()` (worker-crossing.ts). */
  crossingsSource: string;
  /** `quickjsInstances.toString()` (worker-instances.ts). */
  instancesSource: string;
  /** The template an earlier thread of this process made (threads.ts); absent, this thread makes one. */
  template?: QuickJSTemplate;
}

// biome-ignore lint/suspicious/noExplicitAny: packages are loaded by path at run time, untyped.
export function quickjsWorkerMain(req: (id: string) => any): void {
  // biome-ignore lint/suspicious/noExplicitAny: the worker loads its packages by path at run time.
  type Any = any;
  const { parentPort, workerData } = req("node:worker_threads") as { parentPort: Any; workerData: QuickJSWorkerData };
  const instances = new Map<number, Instance>();

  // Returns nothing: host functions return what post returns, and a value (postMessage's true)
  // would reach the guest.
  const post = (message: unknown): void => {
    parentPort.postMessage(message);
  };

  function release(handle: Any): void {
    try {
      handle?.dispose();
    } catch {}
  }

  // The worker's parts, evaluated from the sources the host sent (this thread cannot import).
  const crossings = (new Function(`return (${workerData.crossingsSource})`)() as typeof quickjsCrossings)({
    post,
    instances,
    release,
  });
  const { describeError, inVm, threw, callInternal } = crossings;
  // The warm-up modules: given at the start, or in the host's "warm-up" message (the first counts).
  let warmUpGiven: (modules: string) => void = () => {};
  const warmUpModules =
    workerData.warmUpModules !== undefined
      ? Promise.resolve(workerData.warmUpModules)
      : new Promise<string>((resolve) => {
          warmUpGiven = resolve;
        });
  const { create, dispose } = (new Function(`return (${workerData.instancesSource})`)() as typeof quickjsInstances)({
    req,
    workerData,
    warmUpModules,
    post,
    instances,
    crossings,
    release,
  });

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
      const error = describeError(inst, compiled.error);
      // As the v8 engine words a module it cannot compile: "<filename>: <what the parser said>".
      if (error.name === "SyntaxError") error.message = `${script.filename}: ${error.message}`;
      threw(inst, error, "compile");
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
   * evaluation's entry is named `<n>\u2063<filename>` instead, and its imports
   * `<n>\u2063\u2063<specifier>` (so an import named as the entry's filename is the import, as on
   * v8, not the entry importing itself); the host takes the tags out of stacks (QuickJSInstance),
   * so frames still read `<guest>:3:13`. The guest can read `n`
   * (import.meta.url, a stack): it counts this instance's evaluations only, never other
   * instances' on the thread (a counter per thread told a tenant how many runs others made).
   */
  function evaluateModule(inst: Instance, message: Extract<ToWorker, { t: "evaluate" }>): void {
    const module = message.module;
    if (!module) return;
    const vm = inst.vm;
    inst.notFound = undefined;
    inst.uncompiled = undefined;
    const tag = `${++inst.evaluations}\u2063`;
    const entry = `${tag}${module.filename}`;
    const importTag = `${tag}\u2063`;
    let entryRequested = false;
    // Specifiers are names, not paths: the normalizer keeps QuickJS from resolving "./x" against
    // the importer, and gives an import the tag of the module importing it.
    inst.rt.setModuleLoader(
      (name: string) => {
        if (name === entry) return module.code;
        const specifier = name.startsWith(importTag) ? name.slice(importTag.length) : undefined;
        if (specifier !== undefined && Object.hasOwn(module.imports, specifier)) return module.imports[specifier];
        // A source import esbuild refused fails whatever imports it, as on v8, which compiles
        // imports as they are linked; one nothing imports costs nothing.
        if (specifier !== undefined && Object.hasOwn(module.uncompiled, specifier)) {
          inst.uncompiled = module.uncompiled[specifier];
          return { error: new SyntaxError(inst.uncompiled) };
        }
        const shown = specifier ?? name.replace(/^\d+\u2063\u2063?/, "");
        // The message a guest sees (a dynamic import() it catches) is the refusal alone; the
        // host knows it by this instance's `notFound` flag, not by a prefix in the text.
        inst.notFound = module.notFound.replace('"%s"', JSON.stringify(shown));
        return { error: new Error(inst.notFound) };
      },
      (base: string, requested: string) => {
        // No specifier holds U+2063 (names refuse it): one that does names a module by its tag,
        // this evaluation's or an earlier one's (from `new Function`, whose code has no tag of
        // its own to resolve against), and QuickJS hands back one it loaded without asking the
        // loader. Only the driver's own import of the entry (the first) is such a name.
        if (requested.includes("\u2063")) {
          if (requested === entry && !entryRequested) {
            entryRequested = true;
            return requested;
          }
          return `\u2063${requested}`;
        }
        // The importer's evaluation, whether it is that evaluation's entry or one of its imports.
        const at = base.indexOf("\u2063");
        return at > 0 ? `${base.slice(0, at + 1)}\u2063${requested}` : requested;
      },
    );
    const result = vm.evalCode(`import * as ns from ${JSON.stringify(entry)};\n__cordon_entry(ns);`, "<cordon>", {
      type: "module",
    });
    if (result.error) {
      const error = describeError(inst, result.error);
      release(result.error);
      // Static imports are loaded here, before any of the module's code runs.
      threw(inst, error, "link");
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
  const heardRequest = (quiet: boolean) => {
    const now = performance.now();
    // The host has paused its polling (it found a core lost): turning here would take it again.
    if (quiet) {
      pollUntil = 0;
      lastRequest = Number.NEGATIVE_INFINITY;
      return;
    }
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
    if (message.t === "warm-up") {
      warmUpGiven(message.modules);
      return;
    }
    heardRequest((message as { quiet?: boolean }).quiet === true);
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
    // Stopped by the host, its dispose queued behind: what would run guest code is dropped. A
    // stopped guest's queued timer firings each ran first (1,000 intervals of 0 ms: ~120 ms of
    // this thread, counted for no one, while new instances waited for a thread).
    const runsGuest = message.t === "evaluate" || message.t === "call" || message.t === "settle" || message.t === "fire";
    if (runsGuest && Atomics.load(inst.control, 0) !== 0) {
      if ("seq" in message) post({ t: "reply", id: message.id, seq: message.seq, error: "the run was stopped" });
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
        if (message.seq !== undefined) post({ t: "reply", id: inst.id, seq: message.seq, value: true });
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
