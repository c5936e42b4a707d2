import { type BindingsLike, EMPTY_BINDINGS_TEXT, hostModuleSources, moduleNotFound } from "../../core/bindings.js";
import { pollUntilSettled } from "../../core/busy-poll.js";
import { CordonError } from "../../core/errors.js";
import { joinTexts } from "../../core/joined-texts.js";
import { MAX_PENDING_HOST_CALLS } from "../../core/limits.js";
import type { LineMap } from "../../core/source-map.js";
import { normalizeSource } from "../../core/source.js";
import {
  type EngineInstance,
  type EvaluateRequest,
  type InstanceListener,
  type RuntimeCaps,
  renameThrownOutcomes,
  sameCaps,
} from "../instance.js";
import { CONTROL_BYTES, type FromWorker } from "./protocol.js";
import type { QuickJSThread, QuickJSThreads } from "./threads.js";

let nextId = 0;

/**
 * Host-call answers this long are acknowledged once in the guest (settle): 64 Ki characters, or
 * less under a small maxBridgeCallBytes, so that the answers posted unacknowledged (at most one
 * per pending call, MAX_PENDING_HOST_CALLS) hold no more than the run's cap together.
 */
const ACKED_SETTLE_CHARS = 64 * 1024;

/**
 * What a guest's timer firing costs the machine outside the VM, where the guest's CPU clock
 * (time inside a crossing) cannot see it: the host's timer, the "fire" message, the worker
 * thread waking for it, and its timer changes sent back. Measured raw here (2026-12-04): a
 * setTimeout(0) on the main thread and a message round trip to an idle worker thread, 150-156
 * µs of the process's CPU a cycle. Uncharged, a guest's setTimeout(0) chain took 3.5-4.3x its
 * CPU limit out of the machine (charged ~75 µs a timer, ~300 spent).
 */
export const TIMER_FIRE_NS = 150_000n;

/**
 * performance.now() plus this is process.hrtime in ms, the clock the worker publishes entry times
 * in (worker-crossing.ts, hrtimeOffset: the first performance.now() is slow, so warmed, then the closest
 * of a few readings). The same lines as there: the worker is evaluated from its own source and
 * cannot import them.
 */
const CLOCK_OFFSET = (() => {
  performance.now();
  let offset = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < 5; i++) {
    const hr = process.hrtime();
    offset = Math.max(offset, hr[0] * 1000 + hr[1] / 1e6 - performance.now());
  }
  return offset;
})();

/**
 * The host's handle on a QuickJS runtime living in a worker thread. It speaks the worker
 * protocol and exposes the same operations as a V8 isolate, so executions, spares and warm pools
 * are shared. Shared memory carries the two things that cannot wait for a message: the stop flag
 * (read by QuickJS's interrupt handler while the guest spins) and the guest's CPU time (see
 * CONTROL_BYTES): the time counted so far plus, while a crossing is inside the VM, the time since
 * it entered, so a builtin that never reaches the interrupt handler still meets its CPU limit.
 */
export class QuickJSInstance implements EngineInstance {
  listener: InstanceListener | undefined;
  bindings: BindingsLike | undefined;
  tainted = false;
  /** The worker thread is this process's: its CPU time bounds the guest's (Execution.cpuMs). */
  readonly cpuInProcess = true;
  heapUsedBytes = 0;
  uses = 0;
  lastUsed = performance.now();
  readonly lineMaps = new Map<string, LineMap>();
  private gone = false;
  /** Charged for the timers that fired (TIMER_FIRE_NS each). */
  private firedNs = 0n;
  private lastCaps: RuntimeCaps | undefined;
  /** Settles the busy-poll wait for this instance's next message (core/busy-poll.ts). */
  private heard: (() => void) | undefined;

  private constructor(
    private readonly thread: QuickJSThread,
    private readonly id: number,
    readonly memoryMb: number,
    private readonly control: Int32Array,
    private readonly cpu: Float64Array,
  ) {}

  /** Its worker thread (EngineInstance.site). */
  get site(): object {
    return this.thread;
  }

  static async create(memoryMb: number, threads: QuickJSThreads, warmUp = false): Promise<QuickJSInstance> {
    const thread = await threads.pick();
    const id = ++nextId;
    const shared = new SharedArrayBuffer(CONTROL_BYTES);
    const instance = new QuickJSInstance(thread, id, memoryMb, new Int32Array(shared, 0, 2), new Float64Array(shared, 8, 2));
    thread.attach(id, {
      onMessage: (message) => instance.route(message),
      onLost: (reason) => instance.lost(reason),
      working: () => instance.working(),
    });
    try {
      await thread.request({ t: "create", id, memoryMb, control: shared, warmUp });
    } catch (error) {
      thread.detach(id);
      throw error;
    }
    return instance;
  }

  get disposed(): boolean {
    return this.gone;
  }

  /** In a crossing (its worker wrote when it entered; 0 between crossings), and not told to stop. */
  working(): boolean {
    return !this.gone && Atomics.load(this.control, 0) === 0 && this.cpu[1] !== 0;
  }

  cpuTimeNs(): bigint {
    const control = this.control;
    const cpu = this.cpu;
    // A consistent pair: the version is even and unchanged around the reads (worker-crossing.ts, publish).
    for (let attempt = 0; attempt < 4; attempt++) {
      const version = Atomics.load(control, 1);
      if (version & 1) continue;
      const counted = cpu[0];
      const entered = cpu[1];
      if (Atomics.load(control, 1) !== version) continue;
      const inside = entered === 0 ? 0 : Math.max(0, performance.now() + CLOCK_OFFSET - entered);
      return BigInt(Math.round((counted + inside) * 1e6)) + this.firedNs;
    }
    // The worker is entering and leaving crossings too fast to catch between: what it counted will do.
    return BigInt(Math.round(cpu[0] * 1e6)) + this.firedNs;
  }

  async evaluate(request: EvaluateRequest, startCpu: () => void): Promise<void> {
    const { bindings, mode, inputText, caps, source, sourceImports } = request;
    // Lost (its thread ended) before this run reached it: nothing would ever answer.
    if (this.gone) throw new CordonError("ERR_INSTANCE_RESET", "the QuickJS instance was lost before the run started");
    // A fresh instance has nothing installed: empty bindings need no installing (a one-off run's usual case).
    const bindingsText = !bindings || (!this.bindings && bindings.text === EMPTY_BINDINGS_TEXT) ? null : bindings.text;
    if (bindings) this.bindings = bindings;
    this.lastCaps = caps;
    // Each message made whole, not spread from a common one: decision 023.
    if (source.script) {
      this.lineMaps.set(source.filename, source.script.lineMap);
      startCpu();
      const script = { code: source.script.code, filename: source.filename };
      this.thread.post({ t: "evaluate", id: this.id, bindingsText, mode, inputText, caps, script });
      this.expectMessage();
      return;
    }
    // The worker cannot run esbuild: every source import is normalized here, up front, and the
    // host modules' sources are made here too. The worker's loader serves only these.
    this.lineMaps.set(source.filename, source.lineMap);
    const imports = hostModuleSources(this.bindings?.text ?? "{}");
    const uncompiled: Record<string, string> = Object.create(null);
    for (const [specifier, text] of Object.entries(sourceImports)) {
      try {
        const normalized = await normalizeSource(text, specifier, request.compile);
        this.lineMaps.set(specifier, normalized.lineMap);
        imports[specifier] = normalized.code;
      } catch (error) {
        // Refused only where something imports it (the worker's loader): so on v8.
        if (!(error instanceof CordonError && error.code === "ERR_COMPILE")) throw error;
        uncompiled[specifier] = error.message;
      }
    }
    startCpu();
    this.thread.post({
      t: "evaluate",
      id: this.id,
      bindingsText,
      mode,
      inputText,
      caps,
      module: { code: source.code, filename: source.filename, imports, notFound: moduleNotFound("%s"), uncompiled },
    });
    this.expectMessage();
  }

  async call(path: string, argsTexts: string[], caps: RuntimeCaps): Promise<string> {
    const same = sameCaps(this.lastCaps, caps);
    this.lastCaps = caps;
    const joined = joinTexts(argsTexts);
    const value = await this.thread.request(
      { t: "call", id: this.id, path, joined, caps: same ? undefined : caps },
      this.begunSince(),
    );
    // A call whose crossing threw (an interrupt, an uncaught error) reports it through onFailure.
    if (typeof value !== "string") return "";
    // Thrown outcomes ("t…") may name a module-form prefix's frames: their tag goes.
    return value.includes("\u2063") ? renameThrownOutcomes(value, untagged) : value;
  }

  /**
   * Resolves once the thread has the answer in the guest when it is long (the run's AnswerGate
   * waits for that: posted, it is held in the thread's queue, in this process). A short one is
   * not worth a message back.
   */
  async settle(callId: number, ok: boolean, text: string): Promise<unknown> {
    const cap = this.lastCaps?.[3] ?? Number.POSITIVE_INFINITY;
    if (text.length < Math.min(ACKED_SETTLE_CHARS, cap / MAX_PENDING_HOST_CALLS)) {
      this.thread.post({ t: "settle", id: this.id, callId, ok, text });
      this.expectMessage();
      return undefined;
    }
    const taken = this.thread.postForReply({ t: "settle", id: this.id, callId, ok, text });
    this.expectMessage();
    // Refused only when the run was stopped or the thread is gone: the answer is dropped either way.
    return taken.catch(() => undefined);
  }

  async fire(timerId: number): Promise<unknown> {
    this.firedNs += TIMER_FIRE_NS;
    this.thread.post({ t: "fire", id: this.id, timerId });
    this.expectMessage();
    return undefined;
  }

  /**
   * After a pause the worker thread sleeps on an idle core, and waking it there took 125-146 µs
   * here (a MessagePort ping after 20 ms idle; 43-60 µs the other way, to a core that is awake).
   * Woken while the host prepares the run, it is still awake when the run arrives.
   *
   * Where the kernel puts the woken thread decides whether this helps. On this 2-vCPU VM, in a
   * raw worker-thread test (2026-12-03, /proc/thread-self/stat), it put a woken thread on the
   * waking thread's vCPU 94–99 times in 100, and a thread that had just run for a few ms did not
   * preempt the waker. In cordon (the thread makes a spare after each run) the wake was handled
   * ~470 µs into a paced one-off, after the run was posted at ~350 µs. With or
   * without the wake, paced p50 was the same there (1110–1219 µs, four alternated pairs); where an
   * idle core takes the woken thread, it is awake before the run is posted.
   */
  wake(): void {
    this.thread.post({ t: "wake", id: 0 });
  }

  stalled(): boolean {
    return this.thread.stalled;
  }

  ping(): Promise<unknown> {
    return this.thread.request({ t: "ping", id: this.id });
  }

  async measureHeap(): Promise<number> {
    try {
      this.heapUsedBytes = Number(await this.thread.request({ t: "heap", id: this.id }));
    } catch {}
    return this.heapUsedBytes;
  }

  dispose(): void {
    if (this.gone) return;
    this.gone = true;
    this.stopExpecting();
    this.listener = undefined;
    // Stop a spinning guest now: the interrupt handler reads this flag.
    Atomics.store(this.control, 0, 1);
    this.thread.post({ t: "dispose", id: this.id });
    this.thread.detach(this.id);
    if (this.tainted) this.thread.expectResponsive();
  }

  /** The guest answers a post with a message (an outcome, a host call, a log): busy-poll for it. */
  private expectMessage(): void {
    if (this.heard || this.gone) return;
    const heard = new Promise<void>((resolve) => {
      this.heard = resolve;
    });
    void pollUntilSettled(heard, this.thread.busyPollMs, false, this.begunSince());
  }

  /**
   * Has the worker begun on what was just posted: entered a crossing, or finished one, since now?
   * (core/busy-poll.ts pauses polling when a window ends before it had.)
   */
  private begunSince(): (() => boolean) | undefined {
    // Unpolled, nothing judges windows: no closure a call.
    if (!(this.thread.busyPollMs > 0)) return undefined;
    const cpu = this.cpu;
    const counted = cpu[0];
    return () => cpu[1] !== 0 || cpu[0] !== counted;
  }

  private stopExpecting(): void {
    const heard = this.heard;
    this.heard = undefined;
    heard?.();
  }

  private route(message: FromWorker): void {
    this.stopExpecting();
    // A log is not the end: the guest is still running.
    if (message.t === "log") this.expectMessage();
    const listener = this.listener;
    switch (message.t) {
      case "log":
        // A logged error's frames name the guest's modules as its thrown errors' do.
        listener?.onLog(message.level, untagged(message.message), message.index);
        return;
      case "call":
        listener?.onCall(message.callId, message.fnId, message.argsText);
        return;
      case "timers":
        for (let i = 0; i + 1 < message.list.length; i += 2) listener?.onTimer(message.list[i], message.list[i + 1]);
        return;
      case "done":
        listener?.onDone(message.kind, message.kind === "t" ? untagged(message.text) : message.text, message.index);
        return;
      case "threw": {
        if (message.fatal) {
          this.tainted = true;
          listener?.onFailure?.(new CordonError("ERR_MEMORY_LIMIT", message.error.message));
          return;
        }
        // Messages name modules too ("Could not find export 'x' in module '12\u2063\u2063lib'").
        message.error.message = untagged(message.error.message);
        message.error.stack = message.error.stack === undefined ? undefined : untagged(message.error.stack);
        const error = new Error(message.error.message);
        Object.defineProperty(error, "name", { value: message.error.name, configurable: true, writable: true });
        Object.defineProperty(error, "stack", {
          value: message.error.stack ?? `${message.error.name}: ${message.error.message}`,
          configurable: true,
          writable: true,
        });
        if (message.notFound) {
          listener?.onFailure?.(new CordonError("ERR_MODULE_NOT_FOUND", message.error.message));
          return;
        }
        if (message.unparsed) {
          listener?.onFailure?.(new CordonError("ERR_COMPILE", message.error.message));
          return;
        }
        listener?.onFailure?.(error);
        return;
      }
      case "lost":
        this.lost("the QuickJS engine failed and was reloaded");
        return;
    }
  }

  private lost(reason: string): void {
    this.stopExpecting();
    const listener = this.listener;
    this.tainted = true;
    this.gone = true;
    listener?.onFailure?.(new CordonError("ERR_INSTANCE_RESET", reason));
  }
}

/**
 * The worker names each evaluation's modules `<n>\u2063<filename>` and `<n>\u2063\u2063<specifier>`
 * (worker.ts, evaluateModule):
 * thrown errors' stacks read the guest's own names again without it.
 */
function untagged(text: string): string {
  return text.includes("\u2063") ? text.replace(/\d+\u2063\u2063?/g, "") : text;
}
