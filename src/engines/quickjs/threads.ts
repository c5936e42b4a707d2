import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { createRequire } from "node:module";
import { pollingPaused, pollUntilSettled } from "../../core/busy-poll.js";
import { CordonError } from "../../core/errors.js";
import { HOST_CALLBACK_NAMES } from "../guest/bundle.js";
import { compactGuestRuntimeScript } from "../guest/compact-runtime.js";
import { createHostServices } from "../host-services.js";
import { warmUpModulesJson } from "../warm-up-modules.js";
import type { FromWorker, ToWorker } from "./protocol.js";
import { memorySnapshots } from "./memory-snapshot.js";
import { installSeededRandom } from "./seeded-random.js";
import { readQuickJSWasm } from "./wasm-memory-minimum.js";
import { quickjsCrossings } from "./worker-crossing.js";
import { type QuickJSTemplate, quickjsInstances } from "./worker-instances.js";
import { type QuickJSWorkerData, quickjsWorkerMain } from "./worker.js";

/** QuickJS's own stack limit for guest code. */
const STACK_BYTES = 512 * 1024;
/** A worker that does not answer this long after being told to stop a guest is ended. */
const STUCK_MS = 3000;
/**
 * How long a new instance waits for a stalled thread to answer before a replacement thread is
 * started beside it. A guest stopped by its limit lets go within a few ms (0.6–32 measured on an
 * idle machine; up to 139 with every core busy, as in a CI run), its worker busy-polling or asleep.
 * Started at once, nearly every run ended by a limit cost a thread start (~100–200 ms of CPU on
 * other cores: the WASM instantiated again, the template copied, all the slower on a busy machine)
 * and a retirement right after. Only a guest stuck in one long builtin makes the wait a loss.
 */
const STALL_GRACE_MS = 250;

/** What a thread tells the set it belongs to. */
export interface ThreadEvents {
  /** It died or was ended. */
  exit(thread: QuickJSThread): void;
  /** It answered every stop sent to it: no longer stalled. */
  answered(thread: QuickJSThread): void;
  /** It made the process's first template (see QuickJSThreads.pick). */
  template(template: QuickJSTemplate): void;
}

export interface ThreadListener {
  onMessage(message: FromWorker): void;
  /** The thread died or was ended: the instance is gone. */
  onLost(reason: string): void;
  /** In a crossing now and not told to stop: the thread is busy with its work (bounded by its own limits). */
  working?(): boolean;
}

/** One worker thread hosting many QuickJS instances. */
/** A message the worker replies to (it has a `seq`, or may), without the `seq` posting adds. */
type ReplyingMessage = ToWorker extends infer M
  ? M extends { t: string }
    ? "seq" extends keyof M
      ? Omit<M, "seq">
      : never
    : never
  : never;

export class QuickJSThread {
  private readonly worker: Worker;
  private readonly listeners = new Map<number, ThreadListener>();
  private readonly replies = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  private seq = 0;
  private dead = false;
  /** Stops sent to guests on this thread that it has not answered yet (expectResponsive). */
  private unanswered = 0;
  /** Waiting for `unanswered` to reach 0 (or the thread to end): whenAnswered. */
  private answerWaiters: (() => void)[] = [];
  /** One thread too many (see QuickJSThreads.rebalance): given no new instances, ended once idle. */
  private retiring = false;
  /** It has answered a request: from then on guests may have run on it, and it is not believed about templates. */
  private replied = false;
  /** Whether it was started with the template an earlier thread made. */
  readonly startedWithTemplate: boolean;
  private settleFirstReply: () => void = () => {};
  /** Its first reply (its template, if it makes one, came before it), or its end. */
  readonly firstReply = new Promise<void>((resolve) => {
    this.settleFirstReply = resolve;
  });

  constructor(
    data: QuickJSWorkerData,
    private readonly events: ThreadEvents,
    readonly busyPollMs: number,
  ) {
    // The worker's source is evaluated as CommonJS (it needs `require`), so it gets none of the
    // host's node flags: an --input-type=module would make it an ES module (and some flags, like
    // --no-node-snapshot, are refused in workers). QuickJS needs none of them.
    this.startedWithTemplate = data.template !== undefined;
    this.worker = new Worker(`(${quickjsWorkerMain.toString()})(require)`, { eval: true, workerData: data, execArgv: [] });
    this.worker.on("message", (message: FromWorker) => this.route(message));
    this.worker.on("error", (error) => this.lost(`the QuickJS worker failed: ${error.message}`));
    this.worker.on("exit", (code) => this.lost(`the QuickJS worker exited (code ${code})`));
    // The sandbox keeps the host alive while work is in progress; an idle worker must not.
    // (After the listeners: attaching a "message" listener refs the port again.)
    this.worker.unref();
  }

  get load(): number {
    return this.listeners.size;
  }

  get alive(): boolean {
    return !this.dead;
  }

  /**
   * A guest on it was stopped and the thread has not answered since: it may be stuck in a
   * builtin until it is ended. New instances go elsewhere (made here, they waited for the stuck
   * guest and died with the thread: the one-off runs meanwhile failed with ERR_INSTANCE_RESET).
   */
  get stalled(): boolean {
    return this.unanswered > 0;
  }

  /** Started without a template and still making one (its first instance waits for it). */
  get makingTemplate(): boolean {
    return !this.startedWithTemplate && !this.replied && !this.dead;
  }

  /** Alive, answering and not retiring: a thread new instances may go to. */
  get usable(): boolean {
    return !this.dead && this.unanswered === 0 && !this.retiring;
  }

  /** Take no new instances; end once the ones it has are gone (at once if it has none). */
  retire(): void {
    this.retiring = true;
    this.endIfRetired();
  }

  attach(id: number, listener: ThreadListener): void {
    this.listeners.set(id, listener);
  }

  detach(id: number): void {
    this.listeners.delete(id);
    this.endIfRetired();
  }

  /** While polling is paused here (core/busy-poll.ts), the worker is told not to poll either (`quiet`). */
  post(message: ToWorker): void {
    if (!this.dead) this.worker.postMessage(pollingPaused() ? { ...message, quiet: true } : message);
  }

  request(
    message: ReplyingMessage,
    /** Whether the worker has begun on it (see busy-poll.ts, pollUntilSettled). */
    started?: () => boolean,
  ): Promise<unknown> {
    return pollUntilSettled(this.postForReply(message), this.busyPollMs, false, started);
  }

  /**
   * Post `message` and resolve with the worker's reply to it, polling for none (the caller does,
   * if anyone). The message is numbered in place: every caller passes a literal of its own, and
   * a copy spread from it cost ~2 µs a call (decision 023).
   */
  postForReply(message: ReplyingMessage): Promise<unknown> {
    if (this.dead) return Promise.reject(new CordonError("ERR_INSTANCE_RESET", "the QuickJS worker is gone"));
    const seq = ++this.seq;
    (message as { seq?: number }).seq = seq;
    return new Promise((resolve, reject) => {
      this.replies.set(seq, { resolve, reject });
      this.post(message as ToWorker);
    });
  }

  /** After telling a guest to stop: a thread that stays silent is stuck in code the interrupt cannot reach. */
  expectResponsive(): void {
    if (this.dead) return;
    // While another guest on the thread is in a crossing it was not told to stop, the thread is
    // running that, not stuck in the stopped one (one runs at a time): its answer waits behind it.
    // Ended then, the thread took a run it was serving with it (CI: a QuickJS guest encoding a
    // million objects, ERR_INSTANCE_RESET "stopped answering after a guest was stopped").
    const stuck = () => {
      if ([...this.listeners.values()].some((listener) => listener.working?.() === true)) {
        timer = setTimeout(stuck, STUCK_MS);
        timer.unref();
        return;
      }
      void this.worker.terminate();
      this.lost("the QuickJS worker stopped answering after a guest was stopped");
    };
    let timer = setTimeout(stuck, STUCK_MS);
    timer.unref();
    this.unanswered++;
    const answered = () => {
      this.unanswered--;
      clearTimeout(timer);
      if (this.unanswered > 0) return;
      this.wakeAnswerWaiters();
      if (!this.dead) this.events.answered(this);
    };
    this.request({ t: "ping", id: 0 }).then(answered, answered);
  }

  /** Settles once the thread is no longer stalled (answered, or ended). */
  whenAnswered(): Promise<void> {
    if (!this.stalled || this.dead) return Promise.resolve();
    return new Promise((resolve) => this.answerWaiters.push(resolve));
  }

  private wakeAnswerWaiters(): void {
    for (const wake of this.answerWaiters.splice(0)) wake();
  }

  terminate(): Promise<number> {
    this.dead = true;
    this.wakeAnswerWaiters();
    return this.worker.terminate();
  }

  private endIfRetired(): void {
    if (!this.retiring || this.dead || this.listeners.size > 0 || this.replies.size > 0) return;
    void this.terminate();
    this.events.exit(this);
  }

  private route(message: FromWorker): void {
    if (message.t === "template") {
      // Sent before the thread's first reply, when no guest has run on it. Later, it could only
      // come from a guest that escaped QuickJS into this thread: it would reach every thread started after.
      if (!this.replied) this.events.template(message.template);
      return;
    }
    if (message.t === "reply") {
      this.replied = true;
      this.settleFirstReply();
      const waiting = this.replies.get(message.seq);
      if (!waiting) return;
      this.replies.delete(message.seq);
      if (message.error !== undefined) waiting.reject(new CordonError("ERR_INTERNAL", message.error));
      else waiting.resolve(message.value);
      return;
    }
    this.listeners.get(message.id)?.onMessage(message);
  }

  private lost(reason: string): void {
    if (this.dead && this.listeners.size === 0 && this.replies.size === 0) return;
    this.dead = true;
    this.settleFirstReply();
    this.wakeAnswerWaiters();
    for (const waiting of this.replies.values()) waiting.reject(new CordonError("ERR_INSTANCE_RESET", reason));
    this.replies.clear();
    for (const listener of this.listeners.values()) listener.onLost(reason);
    this.listeners.clear();
    this.events.exit(this);
  }
}

const NONE_WAITED: ReadonlySet<QuickJSThread> = new Set();

/** The worker threads of one QuickJS engine: started on demand, one per core by default. */
export class QuickJSThreads {
  private readonly threads: QuickJSThread[] = [];
  private data: QuickJSWorkerData | undefined;
  /** The warm-up modules' JSON: made by esbuild once, not waited for by a thread's start (see pick). */
  private warmUp: Promise<string> | undefined;
  private warmUpModules: string | undefined;
  /** The first template a thread of this engine made: threads started later copy from it. */
  private template: QuickJSTemplate | undefined;
  /** How many threads sent a template (tests: one, however many threads start after it). */
  templatesMade = 0;
  private disposed = false;
  /** How long a pick waits for a stalled thread (STALL_GRACE_MS); tests set it to pin down which way a pick goes. */
  stallGraceMs = STALL_GRACE_MS;

  constructor(
    /** The host's loop busy-polls this long for an answer; the threads for the next request. */
    readonly busyPollMs: number,
    private readonly size = Math.max(2, availableParallelism()),
  ) {}

  /**
   * The least loaded thread, starting a new one while there are fewer than `size`.
   * `waited`: the stalled threads that have had their grace already (stallGraceMs).
   */
  async pick(waited: ReadonlySet<QuickJSThread> = NONE_WAITED): Promise<QuickJSThread> {
    // Begun before anything is awaited: esbuild's start (~160 ms) then runs beside the thread's.
    // A warm-up that cannot be made costs only its benefit.
    this.warmUp ??= warmUpModulesJson().then(
      (json) => (this.warmUpModules = json),
      () => (this.warmUpModules = "[]"),
    );
    this.data ??= await workerData(this.busyPollMs);
    if (this.disposed) throw new CordonError("ERR_INSTANCE_RESET", "the QuickJS engine was disposed");
    // A stalled thread does not count: one more is started beside it (it is answering again,
    // or ended, within STUCK_MS; answering, one thread is retired: rebalance).
    const usable = this.threads.filter((t) => t.usable);
    // While a thread makes the first template, another would make its own (measured: ~0.5 s of a
    // core each, both slower for it): instances wait for that one instead, and threads started
    // once it exists are given it (their first instance then takes ~50 ms, not ~0.5 s). They wait
    // for the template, not on its thread: put there, the engine's first two spares shared one
    // thread, and so did the two warm instances a prefix took from them, whose calls then ran on
    // one core while the other thread idled (QuickJS events 21-25k/s, one thread at 100%).
    const making = this.template === undefined ? usable.find((t) => t.makingTemplate) : undefined;
    if (making && usable.length < this.size) {
      await making.firstReply;
      return this.pick(waited);
    }
    // A thread stalled by a guest its limit just stopped is usually answering again at once: a
    // short wait for it spares a thread start (stallGraceMs). One still stalled after it gets
    // its replacement. Each gets its grace: with two stalled at once (runs stopped on both),
    // the second one's replacement was started as soon as the first answered (CI: a third
    // thread in a test whose stopped guests all answered within 1.7 s).
    const stalled = this.threads.find((t) => t.alive && t.stalled && !waited.has(t));
    if (stalled && usable.length < this.size) {
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, this.stallGraceMs);
      });
      await Promise.race([stalled.whenAnswered(), grace]);
      clearTimeout(timer);
      return this.pick(new Set([...waited, stalled]));
    }
    if (usable.length < this.size) {
      const data = { ...this.data, template: this.template, warmUpModules: this.warmUpModules };
      const thread = new QuickJSThread(data, this.events, this.busyPollMs);
      this.threads.push(thread);
      // Posted once esbuild has made them; the thread boots its template meanwhile, up to its warm-up.
      if (data.warmUpModules === undefined) void this.warmUp.then((modules) => thread.post({ t: "warm-up", id: 0, modules }));
      return thread;
    }
    return usable.reduce((a, b) => (b.load < a.load ? b : a));
  }

  /** How many threads are running (retiring ones included): `size`, plus one per stalled thread until it is retired. */
  get count(): number {
    return this.threads.length;
  }

  private readonly events: ThreadEvents = {
    exit: (gone) => {
      const index = this.threads.indexOf(gone);
      if (index >= 0) this.threads.splice(index, 1);
    },
    answered: () => this.rebalance(),
    template: (template) => {
      this.template ??= template;
      this.templatesMade++;
    },
  };

  /**
   * A stalled thread that answers again leaves one thread too many (its replacement): the least
   * loaded ones beyond `size` are retired, so the count returns to `size` once they are idle.
   */
  private rebalance(): void {
    const usable = this.threads.filter((t) => t.usable).sort((a, b) => a.load - b.load);
    for (let extra = usable.length - this.size; extra > 0; extra--) usable[extra - 1].retire();
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    await Promise.all(this.threads.splice(0).map((t) => t.terminate()));
  }
}

async function workerData(busyPollMs: number): Promise<QuickJSWorkerData> {
  const require = createRequire(import.meta.url);
  return {
    corePath: require.resolve("quickjs-emscripten-core"),
    variantPath: require.resolve("@jitl/quickjs-wasmfile-release-sync"),
    wasm: readQuickJSWasm(require.resolve("@jitl/quickjs-wasmfile-release-sync/wasm")),
    runtimeScript: await compactGuestRuntimeScript(),
    hostServicesSource: createHostServices.toString(),
    seededRandomSource: installSeededRandom.toString(),
    memorySnapshotsSource: memorySnapshots.toString(),
    crossingsSource: quickjsCrossings.toString(),
    instancesSource: quickjsInstances.toString(),
    callbackNames: HOST_CALLBACK_NAMES,
    stackBytes: STACK_BYTES,
    busyPollMs,
  };
}

/** Can QuickJS load here? (Its packages resolve; the WASM itself loads in the worker.) */
export function quickjsAvailable(): boolean {
  try {
    const require = createRequire(import.meta.url);
    require.resolve("quickjs-emscripten-core");
    require.resolve("@jitl/quickjs-wasmfile-release-sync");
    return true;
  } catch {
    return false;
  }
}
