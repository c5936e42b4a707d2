import type * as IVM from "isolated-vm";
import { type BindingsLike, hostModuleSources, moduleNotFound } from "../../core/bindings.js";
import type { RunMode } from "../../core/engine.js";
import { alone, DEFAULT_BUSY_POLL_MS, inBackground, pollingPaused, pollUntilSettled } from "../../core/busy-poll.js";
import { CordonError } from "../../core/errors.js";
import { joinTexts } from "../../core/joined-texts.js";
import { COPY_CHARS_PER_HEAP_BYTE } from "../../core/limits.js";
import type { CompileBound } from "../../core/esbuild-calls.js";
import { normalizeSource } from "../../core/source.js";
import type { LineMap } from "../../core/source-map.js";
import type { GuestSource } from "../../core/source.js";
import { HOST_CALLBACK_NAMES, RUNTIME_FILENAME } from "../guest/bundle.js";
import { hostServices } from "../host-services.js";
import {
  type EngineInstance,
  type EvaluateRequest,
  FailedAfterReturning,
  type InstanceListener,
  type OutboxReader,
  type RuntimeCaps,
  sameCaps,
} from "../instance.js";
import { CallChannel } from "./channel.js";
import { flat, hasPending, intoIsolate, renameLostThrow } from "./crossing-text.js";
import { charged, hostTimeSince } from "./host-time.js";
import { disposeIsolate, guestRunning, trackIsolate } from "./isolates.js";
import { compileFactory, evaluableInIsolate } from "./large-script.js";
import { loadIsolatedVm } from "./load.js";
import { compileRuntime, recacheRuntime, warmUp } from "./runtime-script.js";
import { syncCall } from "./sync-call.js";
import { fromShallowStack } from "./shallow-stack.js";
import { CrossingDrain } from "./crossing-drain.js";
import { Outbox } from "./outbox.js";
import { LeftoverWatch } from "./leftover-watch.js";

/** The driver imports the guest under this name. A guest importing it only imports itself. */
const ENTRY_SPECIFIER = "cordon:entry";
/** How long an export whose served call was slow crosses the usual way (V8Instance.slowPaths). */
export const SLOW_PATH_MS = 1000;
/**
 * Text a stream of crossings may leave in the isolate before the next waits for its task loop to
 * end: a sixteenth of its memory limit in characters (a two-byte text is twice that in bytes).
 */
const DRAIN_BUDGET_DIVISOR = 16;
const MIN_DRAIN_CHARS = 256 * 1024;

type Ref = IVM.Reference<(...args: unknown[]) => unknown>;

/** The runtime's internals the host calls (see GuestInternals). */
const REF_NAMES = [
  "begin",
  "install",
  "start",
  "runScript",
  "runFactory",
  "settle",
  "fire",
  "call",
  "recover",
  "ping",
  "warmUp",
  "serve",
] as const;
type RefName = (typeof REF_NAMES)[number];

export interface V8InstanceOptions {
  /** Run cordon's own modules once before the instance is handed out (spares made ahead). */
  warmUp?: boolean;
  busyPollMs?: number;
  /** Calls the caller allows to block (`blockForMs`) run on this thread: process workers only. */
  syncCalls?: boolean;
}

/**
 * One V8 isolate with a context, the guest runtime bootstrapped in it, and the host callbacks
 * wired to whichever execution currently owns it. Isolates are single-threaded: at most one
 * execution owns an instance at a time.
 */
export class V8Instance implements EngineInstance {
  listener: InstanceListener | undefined;
  bindings: BindingsLike | undefined;
  /** A fired limit, an abort or a crash: never reuse. */
  tainted = false;
  /** The isolate's threads are this process's: its CPU time bounds the guest's (Execution.cpuMs). */
  readonly cpuInProcess = true;
  lastUsed = performance.now();
  heapUsedBytes = 0;
  uses = 0;
  private lastCaps: RuntimeCaps | undefined;
  /** Calls in a stream go through shared memory (./channel.ts), made on the first such call. */
  private channel: CallChannel | undefined;
  private lastCallEnd = Number.NEGATIVE_INFINITY;
  /**
   * Exports whose served call outlasted 50 polling windows, and until when (performance.now()) they
   * cross the usual way. For a while, not for good: a stall of the machine (a collection, a thread
   * waiting for a core) makes a quick call that long too, and took its export off the channel for
   * the instance's whole life.
   */
  private readonly slowPaths = new Map<string, number>();
  /** What served calls left queued, run as the serving task ends (leftover-watch.ts). */
  private readonly leftovers = new LeftoverWatch({
    channel: () => this.channel,
    gone: () => this.isolate.isDisposed,
    overran: () => {
      // No execution is attached: nothing reports it, the pool discards the instance.
      this.tainted = true;
      this.dispose();
    },
  });
  /** Source maps by module filename, so failures report the caller's own lines. */
  readonly lineMaps = new Map<string, LineMap>();
  /**
   * Host thread time spent on the guest's behalf, beyond what the isolate's clock counts: its
   * synchronous callbacks (logs, timers, URL parsing, random bytes: see `charged`) and its timers'
   * firings. Host functions (globals, imports, fetch) are not in it: time awaiting them is not CPU.
   */
  hostNs = 0n;
  /** Crossings wait here once enough text crossed without the isolate's task loop ending (crossing-drain.ts). */
  private readonly drain: CrossingDrain;

  private constructor(
    readonly isolate: IVM.Isolate,
    readonly context: IVM.Context,
    readonly memoryMb: number,
    private readonly busyPollMs: number,
    /** Quick calls may run on this thread with applySync (process workers: ./sync-call.ts). */
    private readonly syncCalls: boolean,
    private readonly refs: Record<RefName, Ref>,
    /** The log lines and timer changes the guest wrote without crossing (outbox.ts). */
    private readonly outbox: Outbox,
  ) {
    this.drain = new CrossingDrain(Math.max(MIN_DRAIN_CHARS, (memoryMb * 1024 * 1024) / DRAIN_BUDGET_DIVISOR));
  }

  /** A new isolate, its runtime bootstrapped (and warmed up when made ahead). */
  static create(memoryMb: number, options: V8InstanceOptions = {}): Promise<V8Instance> {
    // Its crossings keep a pool thread busy: the loop does not busy-poll meanwhile.
    return inBackground(V8Instance.make(memoryMb, options));
  }

  private static async make(memoryMb: number, options: V8InstanceOptions): Promise<V8Instance> {
    const ivm = loadIsolatedVm();
    const isolate = new ivm.Isolate({ memoryLimit: memoryMb });
    trackIsolate(isolate);
    try {
      const context = await isolate.createContext();
      const holder: { instance?: V8Instance } = {};
      const on = (key: "onLog" | "onCall" | "onTimer" | "onDone") =>
        ((...args: unknown[]) => (holder.instance?.listener?.[key] as ((...a: unknown[]) => void) | undefined)?.(...args)) as (
          ...args: never[]
        ) => unknown;
      const n = HOST_CALLBACK_NAMES;
      const callbacks: [string, (...args: never[]) => unknown][] = [
        [n.log, charged(holder, on("onLog"))],
        [n.call, on("onCall")],
        [n.timer, charged(holder, on("onTimer"))],
        [n.done, on("onDone")],
        // A long URL's parts go as the runtime's other long texts do (crossing-text.ts): each
        // parse of a 3 KB URL otherwise left 3 KB outside the isolate's heap until a full collection.
        [n.parseUrl, charged(holder, (input: unknown, base?: unknown) => intoIsolate(hostServices.parseUrl(input, base)))],
        [
          n.setUrlPart,
          charged(holder, (href: unknown, part: unknown, value: unknown) =>
            intoIsolate(hostServices.setUrlPart(href, part, value)),
          ),
        ],
        [n.randomBytes, charged(holder, hostServices.randomBytes)],
      ];
      for (const [name, fn] of callbacks) context.global.setSync(name, new ivm.Callback(fn));
      // Taken by the runtime as it starts, like the callbacks: no crossing of its own.
      const outbox = new Outbox();
      context.global.setSync(n.outbox, new ivm.ExternalCopy(outbox.memory).copyInto({ release: true }));
      const script = await compileRuntime(isolate);
      const internals = (await script.run(context, { reference: true })) as IVM.Reference<Record<string, unknown>>;
      const get = (name: string) => internals.getSync(name, { reference: true }) as Ref;
      // One allocation past the heap limit is a V8 fatal error, which ends this whole process:
      // no encoding in the isolate may copy more than COPY_CHARS_PER_HEAP_BYTE (Codec.limitCopies).
      await get("limitCopies").apply(undefined, [Math.floor(memoryMb * 1024 * 1024 * COPY_CHARS_PER_HEAP_BYTE)]);
      const refs = Object.fromEntries(REF_NAMES.map((name) => [name, get(name)])) as Record<RefName, Ref>;
      const busyPollMs = options.busyPollMs ?? DEFAULT_BUSY_POLL_MS;
      const instance = new V8Instance(isolate, context, memoryMb, busyPollMs, options.syncCalls === true, refs, outbox);
      if (options.warmUp) {
        await warmUp(refs);
        await recacheRuntime(isolate);
      }
      holder.instance = instance;
      return instance;
    } catch (error) {
      disposeIsolate(isolate);
      throw error;
    }
  }

  get disposed(): boolean {
    return this.isolate.isDisposed;
  }

  drainOutbox(reader: OutboxReader): void {
    this.outbox.drain(reader);
  }

  /**
   * Guest code runs in `work` (a crossing, a module's evaluation, a serving task): when it ends,
   * the listener reads the outbox, so a timer the guest set in it is armed. Every task goes
   * through here, or its timers would never fire.
   */
  private running<T>(work: Promise<T>): Promise<T> {
    const tracked = guestRunning(work, this.isolate);
    tracked.then(this.taskEnded, this.taskEnded);
    return tracked;
  }

  private readonly taskEnded = (): void => {
    const listener = this.listener;
    if (!listener?.onTaskEnd) return;
    const start = process.hrtime.bigint();
    listener.onTaskEnd();
    // What the host does for the outbox's entries (arming timers, keeping lines) is the guest's
    // time as a crossing's would be, without the hand-off: none happened.
    this.hostNs += process.hrtime.bigint() - start;
  };

  /** The isolate's CPU time, and the host's own on the guest's behalf (see `hostNs`). */
  cpuTimeNs(): bigint {
    return this.isolate.cpuTime + this.hostNs;
  }

  async evaluate(request: EvaluateRequest, startCpu: () => void): Promise<void> {
    const { bindings, mode, inputText, caps, source, sourceImports } = request;
    if (source.script) {
      // No imports, no top-level await: the whole run crosses once.
      startCpu();
      const scriptSource = { ...source, script: source.script };
      // Too long for the runtime's eval (see large-script.ts): compiled from here instead.
      if (evaluableInIsolate(source.script.code, source.filename, this.memoryMb)) {
        await this.runScript(bindings, mode, inputText, caps, scriptSource);
      } else {
        await this.runCompiled(bindings, mode, inputText, caps, scriptSource);
      }
      return;
    }
    if (bindings) await this.start(bindings, mode, inputText, caps);
    else await this.begin(mode, inputText, caps);
    // Only source imports are compiled within the run's bound: without them, no bound is made.
    const bound = Object.keys(sourceImports).length > 0 ? request.compile : undefined;
    const driver = await this.link(source, sourceImports, bound);
    startCpu();
    await this.running(driver.evaluate()).catch(renameLostThrow);
  }

  /** Install host bindings (globals and host modules) once for this instance's lifetime. */
  async install(bindings: BindingsLike): Promise<void> {
    this.bindings = bindings;
    await this.cross("install", [intoIsolate(bindings.text)], bindings.text.length);
  }

  /** Install bindings and begin the first run in one crossing (fresh instances). */
  start(bindings: BindingsLike, mode: RunMode, inputText: string, caps: RuntimeCaps): Promise<unknown> {
    this.bindings = bindings;
    this.lastCaps = caps;
    return this.cross(
      "start",
      [intoIsolate(bindings.text), mode, intoIsolate(inputText), ...caps],
      bindings.text.length + inputText.length,
    );
  }

  /**
   * A whole run in one crossing, for modules with a script form: install `bindings` (fresh
   * instances; undefined on warm ones), begin, evaluate, call. The outcome arrives through onDone.
   */
  runScript(
    bindings: BindingsLike | undefined,
    mode: RunMode,
    inputText: string,
    caps: RuntimeCaps,
    source: GuestSource & { script: NonNullable<GuestSource["script"]> },
  ): Promise<unknown> {
    this.startScript(bindings, caps, source);
    const args = [
      bindings ? intoIsolate(bindings.text) : null,
      mode,
      intoIsolate(inputText),
      ...caps,
      intoIsolate(source.script.code),
      source.filename,
    ];
    return this.cross("runScript", args, (bindings?.text.length ?? 0) + inputText.length + source.script.code.length);
  }

  /** runScript for a script form compiled from the host: compile, make its factory, then one crossing. */
  async runCompiled(
    bindings: BindingsLike | undefined,
    mode: RunMode,
    inputText: string,
    caps: RuntimeCaps,
    source: GuestSource & { script: NonNullable<GuestSource["script"]> },
  ): Promise<unknown> {
    this.startScript(bindings, caps, source);
    // A serving task holds the isolate's thread: the compile would queue behind it.
    this.channel?.close();
    const factory = await compileFactory(this.isolate, this.context, source.script.code, source.filename);
    const args = [
      factory.derefInto({ release: true }),
      bindings ? intoIsolate(bindings.text) : null,
      mode,
      intoIsolate(inputText),
      ...caps,
    ];
    return this.cross("runFactory", args, (bindings?.text.length ?? 0) + inputText.length);
  }

  /** What runScript and runCompiled note before their crossing: the run's bindings, caps and line map. */
  private startScript(
    bindings: BindingsLike | undefined,
    caps: RuntimeCaps,
    source: GuestSource & { script: NonNullable<GuestSource["script"]> },
  ): void {
    if (bindings) this.bindings = bindings;
    this.lastCaps = caps;
    this.lineMaps.set(source.filename, source.script.lineMap);
  }

  /** Reset per-run state in the guest: caps, input, pending timers and host calls of earlier runs. */
  begin(mode: RunMode, inputText: string, caps: RuntimeCaps): Promise<unknown> {
    this.lastCaps = caps;
    return this.cross("begin", [mode, intoIsolate(inputText), ...caps], inputText.length);
  }

  settle(id: number, ok: boolean, text: string): Promise<unknown> {
    return this.cross("settle", [id, ok, intoIsolate(text)], text.length).catch(renameLostThrow);
  }

  /**
   * A timer of the guest's falls due: a crossing the guest asked for, charged like its callbacks
   * (the host's part of it: the request here, its answer later on this loop). Uncharged, 1000
   * intervals of 0 ms took 1.7 s of the host thread's CPU within a 300 ms CPU limit.
   */
  fire(id: number): Promise<unknown> {
    const start = process.hrtime.bigint();
    const crossing = this.cross("fire", [id]);
    this.hostNs += hostTimeSince(start);
    return crossing.catch(renameLostThrow);
  }

  /**
   * Call a dotted export of the prepared prefix once per argument list, in one crossing. Resolves
   * with the outcomes joined by U+0001; "p" marks one that arrives later through onDone.
   */
  call(
    path: string,
    argsTexts: string[],
    caps: RuntimeCaps,
    blockForMs?: number,
    leftoverMs = Number.POSITIVE_INFINITY,
  ): Promise<string> {
    // Caps cross only when they changed: every argument costs on the host's thread.
    const same = sameCaps(this.lastCaps, caps);
    this.lastCaps = caps;
    // One joined string (core/joined-texts.ts) crosses cheaper than an array.
    const joined = flat(joinTexts(argsTexts));
    // Made only for a crossing (shared memory takes the string itself): a long text's copy is single-use.
    const crossingArgs = () => {
      const text = intoIsolate(joined);
      return same ? [path, text] : [path, text, caps[0], caps[1], caps[2], caps[3]];
    };
    // On this thread when allowed (process workers); in a stream of calls, through shared memory
    // (./channel.ts); else one crossing.
    if (blockForMs !== undefined && this.syncCalls && !this.channel?.serving) return this.callSync(crossingArgs(), blockForMs);
    const served = this.inStream(path) ? this.callServed(path, joined, same ? undefined : caps, leftoverMs) : undefined;
    if (served) return served;
    return (this.cross("call", crossingArgs(), joined.length) as Promise<string>).then(
      (out) => {
        this.lastCallEnd = performance.now();
        return out;
      },
      async (error: unknown) => {
        const out = this.endedAfterReturning(error) ? await this.cross("recover", []).catch(() => undefined) : undefined;
        return this.recovered(out, error);
      },
    );
  }

  /** The outcomes a call returned before its task failed (see endedAfterReturning), or the failure. */
  private recovered(out: unknown, error: unknown): string {
    if (typeof out !== "string") throw error;
    this.lastCallEnd = performance.now();
    if (hasPending(out)) throw new FailedAfterReturning(out, error);
    return out;
  }

  /**
   * Whether a call crossing's failure came as its task ended, after the call had returned: no
   * limit fired (the isolate lives, no CordonError), so it is what isolated-vm throws for a
   * promise rejected with nothing to handle it. The runtime catches every throw of the call
   * itself. The outcomes the call returned then stand (`recover` reads them), as an outcome
   * that arrives before its task ends does on every path (Execution.taskFailed).
   */
  private endedAfterReturning(error: unknown): boolean {
    return !(error instanceof CordonError) && !this.isolate.isDisposed;
  }

  /**
   * The call on this thread, blocking it for at most `ms` (the isolate's own timer stops the
   * guest then). No thread hand-off either way: in a process worker a warm call went from ~240 to
   * ~140 µs p50 (docs/decisions/012-synchronous-calls-in-workers.md).
   */
  private callSync(args: Parameters<Ref["applySync"]>[1] & unknown[], ms: number): Promise<string> {
    try {
      const out = syncCall(this.refs.call, args, ms);
      this.lastCallEnd = performance.now();
      this.taskEnded();
      return Promise.resolve(out);
    } catch (error) {
      this.taskEnded();
      // A time limit comes as a CordonError: the execution fails with it, which taints the
      // instance, and the pool disposes it on release, as after any fired limit.
      let out: unknown;
      if (this.endedAfterReturning(error)) {
        try {
          out = this.refs.recover.applySync(undefined, []);
        } catch {}
      }
      try {
        return Promise.resolve(this.recovered(out, error));
      } catch (failure) {
        return Promise.reject(failure);
      }
    }
  }

  private inStream(path: string): boolean {
    return (
      this.busyPollMs > 0 &&
      performance.now() - this.lastCallEnd <= this.busyPollMs &&
      !this.slowNow(path) &&
      alone() &&
      // Polling paused: windows end before the isolate's thread gets a core; a serving task spinning there would not get one either.
      !pollingPaused()
    );
  }

  /** The serving task is running what served calls left queued (LeftoverWatch.stalled): hand it no call. */
  stalled(): boolean {
    return this.leftovers.stalled();
  }

  /** Does `path` still cross the usual way after a slow served call (slowPaths)? */
  private slowNow(path: string): boolean {
    const until = this.slowPaths.get(path);
    if (until === undefined) return false;
    if (performance.now() < until) return true;
    this.slowPaths.delete(path);
    return false;
  }

  /** A call through the shared-memory channel; undefined when it cannot take this one. */
  private callServed(
    path: string,
    joined: string,
    caps: RuntimeCaps | undefined,
    leftoverMs: number,
  ): Promise<string> | undefined {
    this.channel ??= new CallChannel();
    const channel = this.channel;
    if (!channel.fits(path, joined) || channel.awaiting) return undefined;
    // A new task when none serves, or behind one that is ending (CallChannel.mayOpen).
    const opening = channel.mayOpen;
    if (opening) channel.open(this.refs.serve, loadIsolatedVm(), this.busyPollMs, (work) => this.running(work));
    else if (!channel.serving) return undefined;
    const started = performance.now();
    return channel.call(path, joined, caps, this.busyPollMs)?.then(async (answer) => {
      this.lastCallEnd = performance.now();
      // A call that long is not worth a spinning task (its answer was read on a 1 ms timer): the
      // usual way for SLOW_PATH_MS, then one served call tries again (an export that really is
      // slow pays a late read of one answer a second).
      // (Not judged on the call that started the task: that one waited for the isolate's thread.)
      if (!opening && this.lastCallEnd - started > 50 * this.busyPollMs)
        this.slowPaths.set(path, this.lastCallEnd + SLOW_PATH_MS);
      if (!("text" in answer)) return channel.bigAnswer();
      // Answered with the task serving on: what the call left queued runs when the task ends.
      if (!answer.closed) this.leftovers.watch(leftoverMs);
      // The task ended with this answer (a call that returned a promise ends it): what that call
      // left queued runs as the task ends, and the crossing has returned only then. A task that
      // failed as it ended (a promise rejected with nothing to handle it) fails the calls whose
      // outcome is still to come; outcomes already made stand (Execution.taskFailed).
      if (answer.closed) {
        // A stream of async calls: the next serving task queues behind this one (CallChannel.reopen).
        const streaming = !hasPending(answer.text) && !this.isolate.isDisposed && this.inStream(path);
        const failure = await (streaming
          ? channel.reopen(this.refs.serve, loadIsolatedVm(), this.busyPollMs, (work) => this.running(work))
          : channel.ended());
        if (failure !== undefined && hasPending(answer.text)) throw new FailedAfterReturning(answer.text, failure);
      }
      return answer.text;
    });
  }

  /**
   * Call into the isolate; the loop turns until the answer is back (core/busy-poll.ts). A task's
   * failure for a promise rejected with a non-Error that nothing handled says so in cordon's
   * terms (renameLostThrow), on every crossing: script-form runs and calls showed isolated-vm's text.
   */
  /** `chars`: the length of the texts among `args`, which the isolate keeps until its task loop ends (crossing-drain.ts). */
  private cross(name: keyof V8Instance["refs"], args: Parameters<Ref["apply"]>[1] & unknown[], chars = 0): Promise<unknown> {
    return this.drain.through(chars, () => this.crossNow(name, args));
  }

  private crossNow(name: keyof V8Instance["refs"], args: Parameters<Ref["apply"]>[1] & unknown[]): Promise<unknown> {
    // A serving task would hold the isolate's thread: ask it to end first (the crossing queues
    // behind it). Here, not before the drain: one may have opened while this crossing waited.
    this.channel?.close();
    const ref = this.refs[name];
    if (!(this.busyPollMs > 0) || this.isolate.isDisposed) {
      return this.running(fromShallowStack(() => ref.apply(undefined, args))).catch(renameLostThrow);
    }
    // isolated-vm's cpuTime counts from the moment the isolate's thread enters a crossing (it is
    // wall time while one runs): unchanged when a window ends, the thread never got a core.
    const before = this.isolate.cpuTime;
    const begun = () => this.isolate.isDisposed || this.isolate.cpuTime !== before;
    const crossing = this.running(fromShallowStack(() => ref.apply(undefined, args)));
    return pollUntilSettled(crossing, this.busyPollMs, false, begun).catch(renameLostThrow);
  }

  answerReady(): boolean {
    return this.channel?.answered === true;
  }

  /** A cheap round trip: resolves once the isolate has finished everything queued before it. */
  ping(): Promise<unknown> {
    return this.cross("ping", []);
  }

  /**
   * Compile a guest module and everything it imports, linked behind a driver module that hands
   * the evaluated namespace to the runtime's entry. Returns the driver to evaluate.
   */
  async link(source: GuestSource, sourceImports: Record<string, string>, bound?: CompileBound): Promise<IVM.Module> {
    this.lineMaps.set(source.filename, source.lineMap);
    const entry = await this.compile(source.code, source.filename);
    const driver = await this.compile(
      `import * as ns from ${JSON.stringify(ENTRY_SPECIFIER)};\n__cordon_entry(ns);`,
      RUNTIME_FILENAME,
    );
    const hostModules = hostModuleSources(this.bindings?.text ?? "{}");
    const resolved = new Map<string, Promise<IVM.Module>>();
    const resolve = (specifier: string): Promise<IVM.Module> => {
      if (specifier === ENTRY_SPECIFIER) return Promise.resolve(entry);
      let module = resolved.get(specifier);
      if (!module) {
        module = this.resolveImport(specifier, sourceImports, hostModules, bound);
        resolved.set(specifier, module);
      }
      return module;
    };
    await driver.instantiate(this.context, (specifier) => resolve(specifier));
    return driver;
  }

  private async resolveImport(
    specifier: string,
    sourceImports: Record<string, string>,
    hostModules: Record<string, string>,
    bound?: CompileBound,
  ): Promise<IVM.Module> {
    if (Object.hasOwn(sourceImports, specifier)) {
      const normalized = await normalizeSource(sourceImports[specifier], specifier, bound);
      this.lineMaps.set(specifier, normalized.lineMap);
      return this.compile(normalized.code, specifier);
    }
    if (Object.hasOwn(hostModules, specifier)) return this.compile(hostModules[specifier], specifier);
    throw new CordonError("ERR_MODULE_NOT_FOUND", moduleNotFound(specifier));
  }

  private async compile(code: string, filename: string): Promise<IVM.Module> {
    try {
      return await this.isolate.compileModule(code, { filename });
    } catch (error) {
      if (this.isolate.isDisposed) throw error;
      const message = (error as Error)?.message ?? String(error);
      throw new CordonError("ERR_COMPILE", `${filename}: ${message}`);
    }
  }

  /** Refresh the heap figure without blocking the host: an async read, queued behind the guest. */
  async measureHeap(): Promise<number> {
    this.channel?.close();
    try {
      this.heapUsedBytes = (await this.isolate.getHeapStatistics()).used_heap_size;
    } catch {}
    return this.heapUsedBytes;
  }

  dispose(): void {
    this.listener = undefined;
    this.leftovers.stop();
    disposeIsolate(this.isolate);
  }
}
