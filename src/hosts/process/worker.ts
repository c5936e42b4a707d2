import { rmSync } from "node:fs";
import type { BindingsLike } from "../../core/bindings.js";
import { pollUntilSettled, wouldPollProcess } from "../../core/busy-poll.js";
import type { ErrorCode } from "../../core/errors.js";
import { encodeJoinedTextFrame, encodeTextFrame, FrameReader } from "../../core/framing.js";
import type { EngineStats } from "../../core/engine.js";
import { DEFAULT_LIMITS, type ResolvedLimits } from "../../core/limits.js";
import { type HostEvent, type HostRequest, RUN_OVER_TEXT } from "../../core/protocol.js";
import { abortedResult, failedResult, oversizedRequest } from "../../core/results.js";
import type { EngineName, RunResult } from "../../core/types.js";
import { signalAborted, signalReason } from "../../core/abort-reason.js";
import { deathResult, lostResult, resultOfAnswer, resultOfValue, valuesOfAnswer } from "./answers.js";
import { CallBatch, type CallMessage } from "./call-batch.js";
import { BridgeCalls, sendBridgeAnswer } from "./bridge-calls.js";
import { FloodGuard } from "./flood-guard.js";
import { loopHeldMs, watchLoop } from "./loop-stalls.js";
import { PipeOut } from "./pipe-out.js";
import { armBackstop, InFlight, type Pending, type WithoutId } from "./pending.js";
import { PrefixRecords } from "./prefix-records.js";
import { ProcFile } from "../../core/proc-file.js";
import { rssOf } from "./rss.js";
import { heldBytesOf } from "./rss-budget.js";
import type { SpawnedChild } from "../../core/spawned-child.js";
import { spawnWorker } from "./spawn.js";
import type { WorkerConfig } from "./worker-main.js";
import { onAbort } from "../../core/abort-listeners.js";

const START_TIMEOUT_MS = 15_000;

export interface WorkerOptions {
  config: WorkerConfig;
  /** Which partition's work this worker takes ("" = shared). */
  partition: string;
  /** Test hook: another entry script (e.g. one that misbehaves on its pipe). */
  entry?: string;
}

/**
 * The sandbox's side of one worker process: spawning it, framing the protocol over its pipes,
 * routing answers and host calls, and failing exactly the work inside it when it dies.
 */
export class WorkerProcess {
  readonly partition: string;
  private readonly pipePollMs: number;
  pid = 0;
  /** Resident size when it became ready: the calibrated base of its memory budget. */
  baseRss = 0;
  runs = 0;
  lastUsed = performance.now();
  retiring = false;
  /** The worker engine's stats, as of its last answer. */
  engineStats: EngineStats | undefined;
  /** The prefixes this worker holds, as the host knows them. */
  private readonly prefixes = new PrefixRecords();
  private readonly engineOptions: WorkerConfig["engineOptions"];
  private readonly bridgeCalls = new BridgeCalls();
  private readonly child: SpawnedChild;
  private readonly guard: FloodGuard;
  private readonly out: PipeOut;
  /** Calls made in one tick leave in one frame (call-batch.ts); everything else goes after them. */
  private readonly calls = new CallBatch(
    (message) => this.write(message),
    (header, texts) => this.writeFrame(encodeJoinedTextFrame(header, "argsText", texts), this.laneOf(header)),
  );
  private readonly dir: string;
  private readonly pending = new InFlight();
  private nextId = 0;
  private deathCode: ErrorCode | undefined;
  /** The request whose silence ended the worker: it alone fails with the timeout's code. */
  private culprit: number | undefined;
  /** When the worker last sent anything: a slow worker still talks, a hung one does not. */
  private lastHeard = performance.now();
  private readonly unwatchLoop = watchLoop();
  /** loopHeldMs() at lastHeard: silence while this process's loop was held is not the worker's. */
  private heldAtHeard = loopHeldMs();
  private deathCause = "";
  private dead = false;
  /** SIGKILL sent: what it still writes is not read (a flooding worker's frames cost a parse each). */
  private killed = false;
  /** stop() was called: the worker is ending once its stdin closes. */
  private stopping = false;
  private readonly ready: Promise<void>;
  private onExit: ((worker: WorkerProcess, cause: string) => void) | undefined;

  constructor(
    private readonly engine: Exclude<EngineName, "auto">,
    options: WorkerOptions,
  ) {
    this.partition = options.partition;
    this.pipePollMs = options.config.pipePollMs;
    this.engineOptions = options.config.engineOptions;
    ({ child: this.child, dir: this.dir } = spawnWorker(options.config, options.entry));
    this.out = new PipeOut();
    this.guard = new FloodGuard();
    this.ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error("the worker did not start in time"));
        // Ended, not left to start late: a pool would otherwise keep handing out a worker whose
        // start has failed for good.
        this.kill("ERR_INSTANCE_RESET", "the worker did not start in time");
      }, START_TIMEOUT_MS);
      const reader = new FrameReader(
        // (Heard already: every frame comes out of a chunk the data listener below has noted.)
        (message, bytes) => {
          const event = message as HostEvent;
          const oversized = this.guard.frameSize(event.t, bytes);
          if (oversized) {
            this.retire("ERR_INSTANCE_RESET", oversized);
            return;
          }
          if (event.t === "ready" && !this.pid) {
            clearTimeout(timer);
            this.pid = event.pid;
            this.baseRss = event.rssBytes;
            resolve();
            return;
          }
          this.route(event);
        },
        (reason) => this.retire("ERR_INSTANCE_RESET", `protocol error: ${reason}`),
      );
      this.child.onStarted((_pid, [stdin, stdout]) => {
        if (!stdin || !stdout) return;
        stdin.on("error", () => {});
        this.out.attach(stdin);
        stdout.on("data", (chunk: Buffer) => {
          // A worker sending a large answer is talking, not hung, before its last chunk arrives.
          this.heard();
          if (!this.killed) reader.push(chunk);
        });
      });
      this.child.onExit((code, signal) => {
        clearTimeout(timer);
        reject(new Error(`the worker exited while starting (code ${code}, signal ${signal})`));
        this.died(code, signal);
      });
      this.child.onError((error) => {
        clearTimeout(timer);
        reject(error);
        this.died(null, null, error.message);
      });
    });
    // An idle worker must not keep the host process alive: a sandbox someone forgot to dispose
    // would otherwise hang its process at exit. Starting up and work in flight hold it.
    this.setHeld(true);
    this.ready.then(
      () => {
        if (this.pending.size === 0) this.setHeld(false);
      },
      () => {},
    );
  }

  /** Keep the host's event loop alive while this worker has work in flight, and only then. */
  private setHeld(held: boolean): void {
    this.child.hold(held);
  }

  started(): Promise<void> {
    return this.ready;
  }

  /** `listener` hears the worker and why it died (the first reason given, else how it exited). */
  onDeath(listener: (worker: WorkerProcess, cause: string) => void): void {
    this.onExit = listener;
  }

  get alive(): boolean {
    return !this.dead;
  }

  /**
   * May take new work: alive and not on its way out. Killed or stopped, a worker lives on until
   * its exit arrives, and a run given to it then failed with the cause it was ended for (seen:
   * "idle past its time to live", for a run that arrived just after the pool ended its idle
   * worker). A retiring (recycled) worker finishes its runs but takes no new ones.
   */
  get usable(): boolean {
    return !this.dead && !this.killed && !this.stopping && !this.retiring;
  }

  get busy(): number {
    return this.pending.size;
  }

  /** Memory the runs in flight may use, in bytes: part of this worker's budget. */
  get memoryInFlight(): number {
    return this.pending.memoryBytes;
  }

  /** Read the resident size now (the watchdog does, every 25-50 ms); `lastRss` keeps the figure. */
  rss(): number | undefined {
    if (this.pid && !this.statm) this.statm = new ProcFile(`/proc/${this.pid}/statm`);
    const rss = rssOf(this.statm?.read());
    if (rss !== undefined) this.lastRss = rss;
    return rss;
  }

  /** The watchdog's last reading: what stats report, without reading /proc on every call. */
  lastRss = 0;
  /** The worker's /proc/<pid>/statm, kept open (the watchdog reads it every 25-50 ms). */
  private statm: ProcFile | undefined;

  /**
   * Heap of the worker's idle warm instances: part of its memory budget. The worker reports it, so
   * it counts only up to what the host knows may live there (its prefixes' memory limits, times
   * the instances each may keep, within the residency budget): a worker a guest has taken over
   * reported 2^53 and was never killed.
   */
  get warmHeapBytes(): number {
    const { budgetBytes, maxInstances } = this.engineOptions;
    return Math.min(this.engineStats?.idleHeapBytes ?? 0, budgetBytes, this.prefixes.heldBytes(maxInstances));
  }

  /** What the worker keeps of the prefixes it holds besides their instances (their source): part of its budget. */
  get keptBytes(): number {
    return this.prefixes.keptBytes;
  }

  /**
   * Send a request that is answered with a RunResult. `backstopMs`: past it, the worker is ended.
   * The request's `id` (and `abortable`, with a signal) are set here, on `message` itself: a copy
   * of every call's message was a tenth of the host's time per call under load.
   */
  request(
    message: Extract<HostRequest, { t: "run" | "prefix-run" | "prefix-call" }>,
    bindings: BindingsLike | undefined,
    memoryMb: number,
    signal: AbortSignal | undefined,
    backstopMs: number,
  ): Promise<RunResult> {
    const answer = new Promise<RunResult>((resolve) => {
      if (this.dead) return resolve(this.failure());
      if (signal && signalAborted(signal)) return resolve(this.aborted(signalReason(signal)));
      const id = ++this.nextId;
      // Recycling bounds what runs leave behind (instances made and disposed, modules evaluated);
      // a call on a warm instance makes nothing. Counted, a service's warm calls recycled its
      // worker every second or two: measured, 35% fewer calls per second.
      if (message.t !== "prefix-call") this.runs++;
      this.lastUsed = performance.now();
      const owner = message.t === "run" ? undefined : this.prefixes.ownerOf(message.prefix);
      const pending: Pending = {
        resolve,
        bindings,
        memoryMb,
        owner,
        hostCalls: message.limits?.maxBridgeCalls,
        maxAnswerChars: message.limits?.maxBridgeCallBytes,
      };
      if (message.t === "run") pending.oneOff = true;
      this.pending.set(id, pending);
      this.backstop(id, pending, backstopMs, "the worker did not answer within the run's wall time");
      if (this.pending.size === 1) this.setHeld(true);
      if (signal) {
        const stopWatching = onAbort(signal, () => this.send({ t: "abort", id, reason: signalReason(signal) }));
        pending.resolve = (result) => {
          stopWatching();
          resolve(result);
        };
        message.abortable = true;
      }
      if (message.t === "prefix-call")
        message.limits = this.prefixes.callLimitsToSend(message.prefix, message.limits as ResolvedLimits);
      message.poll = wouldPollProcess(this.pipePollMs) || undefined;
      message.id = id;
      this.sendRequest(id, message);
    });
    // In a stream, this loop turns until the answer is read (core/busy-poll.ts, decision 012).
    return pollUntilSettled(answer, this.pipePollMs, true);
  }

  prepare(
    message: WithoutId<Extract<HostRequest, { t: "prepare" }>>,
    bindings: BindingsLike,
    memoryMb: number,
    backstopMs: number,
  ): Promise<{ prefix?: number; result: RunResult; owner: number }> {
    return new Promise((resolve) => {
      if (this.dead) return resolve({ result: this.failure(), owner: 0 });
      const id = ++this.nextId;
      const pending: Pending = {
        resolve: (result) => resolve({ result, owner: id }),
        memoryMb,
        keptBytes: heldBytesOf(message),
        bindings,
        hostCalls: message.limits.maxBridgeCalls,
        maxAnswerChars: message.limits.maxBridgeCallBytes,
        onPrepared: (prefix, result) => {
          if (prefix !== undefined) this.prefixes.prepared(id, bindings);
          resolve({ prefix, result, owner: id });
        },
      };
      this.pending.set(id, pending);
      this.backstop(id, pending, backstopMs, "the worker did not finish preparing within the prefix's wall time");
      if (this.pending.size === 1) this.setHeld(true);
      this.sendRequest(id, { ...message, id } as HostRequest);
    });
  }

  /**
   * Send a request carrying guest-controlled data (code, line maps, input, call arguments). One
   * too large for a frame threw out of run()/prepare() (a 3.4 M-character module's 69.5 MB frame
   * did, and `cordon serve` answered 500): it fails this request alone, as a result.
   */
  private sendRequest(id: number, message: HostRequest): void {
    if (CallBatch.takes(message)) {
      this.calls.add(message as CallMessage);
      return;
    }
    try {
      this.send(message);
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      // The worker never got these limits: the next call to the prefix must carry them.
      if (message.t === "prefix-call") this.prefixes.forgetCallLimits(message.prefix);
      const pending = this.take(id);
      if (!pending) return;
      const result = failedResult(
        this.engine,
        "process",
        oversizedRequest(message, "the pipe to a worker process", error.message),
      );
      if (pending.onPrepared) pending.onPrepared(undefined, result);
      else pending.resolve(result);
    }
  }

  /** Past `ms` unanswered, the worker is ended and `id` alone fails with ERR_WALL_TIMEOUT (pending.ts). */
  private backstop(id: number, pending: Pending, ms: number, cause: string): void {
    armBackstop(pending, ms, cause, {
      unanswered: () => this.pending.has(id),
      silentForMs: () => performance.now() - this.lastHeard - (loopHeldMs() - this.heldAtHeard),
      end: (why) => {
        this.culprit = id;
        this.kill("ERR_WALL_TIMEOUT", why);
      },
    });
  }

  /** Ask for the warm heap figure (part of this worker's memory budget); the answer updates it. */
  pollStats(): void {
    this.guard.askedStats();
    this.send({ t: "stats", id: 0 });
  }

  disposePrefix(prefix: number, owner: number): void {
    this.prefixes.disposed(prefix, owner, this.pending.callerOf(owner) !== undefined);
    this.send({ t: "prefix-dispose", prefix }, undefined, owner);
    // stats() sums the workers' reports: without a fresh one the prefix was listed, warm, until
    // the next poll (up to a second).
    this.pollStats();
  }

  /** End the worker. Work inside it fails with `code` (ERR_MEMORY_LIMIT for the watchdog). */
  kill(code: ErrorCode, cause: string): void {
    if (this.dead || this.killed) return;
    this.killed = true;
    this.setHeld(true);
    this.deathCode ??= code;
    this.deathCause ||= cause;
    this.child.kill();
  }

  /**
   * The RSS watchdog's kill. The host cannot see which run holds the memory, so it blames the
   * request with the largest memory limit, the latest of equals (the one whose arrival the budget
   * no longer covered); the others fail with ERR_INSTANCE_RESET, killed for a neighbour.
   */
  killForMemory(cause: string): void {
    if (this.dead || this.killed) return;
    // The guest that cannot be stopped holds the memory, not a run still in progress here.
    if (this.unsound !== undefined) {
      this.kill("ERR_INSTANCE_RESET", `${cause}; ${this.unsound}`);
      return;
    }
    let most = -1;
    for (const [id, pending] of this.pending) {
      if (pending.memoryMb < most) continue;
      most = pending.memoryMb;
      this.culprit = id;
    }
    this.kill("ERR_MEMORY_LIMIT", cause);
  }

  /** End the worker gracefully: its stdin closes and it exits; one that lingers is killed. */
  stop(cause: string): void {
    if (this.dead) return;
    this.stopping = true;
    this.deathCause ||= cause;
    // Whoever stops a worker may wait for its exit: hold the event loop until it happens.
    this.setHeld(true);
    this.calls.flush();
    this.out.end();
    const timer = setTimeout(() => this.kill("ERR_INSTANCE_RESET", cause), 1000);
    timer.unref();
  }

  /** A protocol error or an unreadable answer: the worker is not trusted with more work. */
  retire(code: ErrorCode, cause: string): void {
    this.kill(code, cause);
  }

  /**
   * Why this worker holds a guest no limit could stop (its "unsound" event), once it said so. It
   * takes no new work: runs sent to it after one such guest failed, innocent, when the guest's
   * growth had the RSS watchdog kill the worker (ERR_MEMORY_LIMIT for a run sleeping 1 s).
   */
  unsound: string | undefined;

  private retireUnsound(reason: string): void {
    if (this.unsound !== undefined) return;
    this.unsound = `a guest of an earlier run that no limit could stop still ran in this worker (${reason})`;
    this.retiring = true;
    // Nothing else of it to finish: ended now, before the guest grows further (the pool starts another).
    if (this.busy === 0) this.kill("ERR_INSTANCE_RESET", this.unsound);
  }

  /**
   * Frame and write `message`. A frame over MAX_FRAME_BYTES throws a RangeError before anything
   * is written (the worker's pipe stays in step): callers sending guest-controlled data catch it.
   */
  private send(message: HostRequest, onRead?: () => void, lane = this.laneOf(message)): void {
    this.calls.flush();
    this.write(message, onRead, lane);
  }

  private write(message: HostRequest, onRead?: () => void, lane = this.laneOf(message)): void {
    if (this.dead) {
      onRead?.();
      return;
    }
    this.writeFrame(encodeTextFrame(message), lane, onRead);
  }

  /**
   * The lane a request waits in while the pipe is backed up (frame-lanes.ts): its run's, or its
   * prefix's, so a prefix's calls and dispose keep their order and an abort follows what it
   * aborts. A host call's answer goes in its caller's lane, which the sender names; a stats poll
   * in none (ahead of every lane).
   */
  private laneOf(message: Pick<HostRequest, "t"> & { id?: number; prefix?: number }): number | undefined {
    switch (message.t) {
      case "run":
      case "prepare":
        return message.id;
      case "abort":
        return this.pending.get(message.id as number)?.owner ?? message.id;
      case "prefix-run":
      case "prefix-call":
      case "prefix-calls":
      case "prefix-dispose":
        return this.prefixes.ownerOf(message.prefix as number) ?? 0;
      default:
        return undefined;
    }
  }

  /** `onRead` (PipeOut.write): called once the worker has read the frame, or it is dropped. */
  private writeFrame(frame: Buffer, lane: number | undefined, onRead?: () => void): void {
    if (this.dead) {
      onRead?.();
      return;
    }
    this.out.write(frame, lane, onRead);
    const stalled = this.guard.backlog(this.out.unread, this.out.read);
    if (stalled) this.retire("ERR_INSTANCE_RESET", `protocol error: ${stalled}`);
  }

  private route(event: HostEvent): void {
    switch (event.t) {
      case "result":
      case "value": {
        // Checked before it is taken: a request taken and then retired for would never settle.
        if (!this.pending.get(event.id) || this.pending.get(event.id)?.onPrepared) {
          this.retire("ERR_INSTANCE_RESET", `protocol error: an answer to unknown request ${event.id}`);
          return;
        }
        if (event.stats !== undefined && !this.readStats(event.stats)) return;
        const pending = this.take(event.id) as Pending;
        pending.resolve(event.t === "value" ? this.completed(event.valueText, event.run) : this.decode(event.resultText));
        return;
      }
      case "values": {
        const answers = valuesOfAnswer(event.ids, event.runs, event.valueText);
        if (!answers) {
          this.retire("ERR_INSTANCE_RESET", "protocol error: a values answer whose ids, stats and texts do not line up");
          return;
        }
        // Each as the "value" answer it stands for; after one that retired the worker, none.
        for (const answer of answers) {
          if (this.killed || this.dead) return;
          this.route(answer);
        }
        return;
      }
      case "prepared": {
        if (!this.pending.get(event.id)?.onPrepared || (event.prefix !== undefined && !Number.isSafeInteger(event.prefix))) {
          this.retire("ERR_INSTANCE_RESET", `protocol error: an answer to unknown prepare ${event.id}`);
          return;
        }
        if (!this.readStats(event.stats)) return;
        const pending = this.take(event.id) as Required<Pick<Pending, "onPrepared">> & Pending;
        const result = this.decode(event.resultText);
        if (typeof event.prefix === "number")
          this.prefixes.answered(
            event.prefix,
            event.id,
            result.ok ? pending.memoryMb * 1024 * 1024 : undefined,
            pending.keptBytes,
          );
        pending.onPrepared(result.ok ? event.prefix : undefined, result);
        return;
      }
      case "bridge-call": {
        // A run's own bindings while it runs, or a prefix's while a run or call of it is in
        // flight here: a worker cannot reach another prefix's host functions at other times.
        const own = this.pending.get(event.id);
        const caller = own?.bindings ? own : this.pending.callerOf(event.id);
        const bindings = own?.bindings ?? (caller ? this.prefixes.bindingsOf(event.id) : undefined);
        if (!bindings || !caller) {
          const flood = this.guard.strayCall();
          if (flood) this.retire("ERR_INSTANCE_RESET", flood);
          else this.send({ t: "bridge-result", cid: event.cid, ok: false, text: RUN_OVER_TEXT }, undefined, event.id);
          return;
        }
        // The worker ends a run past maxBridgeCalls itself; one that asks for more is not following it.
        if (caller.hostCalls !== undefined && caller.hostCalls-- <= 0) {
          this.retire("ERR_INSTANCE_RESET", "protocol error: more host calls than the run's maxBridgeCalls");
          return;
        }
        const capChars = caller.maxAnswerChars ?? DEFAULT_LIMITS.maxBridgeCallBytes;
        this.bridgeCalls.start(event.cid, event.id, bindings, event, capChars, (cid, answer, delivered) => {
          // Held by the run's gate until the worker has read it off the pipe (or it is dropped).
          let handed = false;
          sendBridgeAnswer(
            (m) => {
              this.send(m, delivered, event.id);
              handed = true;
            },
            cid,
            answer,
          );
          if (!handed) delivered();
        });
        return;
      }
      case "bridge-cancel":
        this.bridgeCalls.cancel(event.cid);
        return;
      case "stats": {
        const unasked = this.guard.statsFrame();
        if (unasked) this.retire("ERR_INSTANCE_RESET", unasked);
        else this.readStats(event.stats);
        return;
      }
      case "ready":
        this.retire("ERR_INSTANCE_RESET", "protocol error: a second ready");
        return;
      case "unsound":
        this.retireUnsound(typeof event.reason === "string" ? event.reason.slice(0, 200) : "");
        return;
      default:
        this.retire("ERR_INSTANCE_RESET", `protocol error: unknown event ${JSON.stringify((event as { t?: unknown }).t)}`);
        return;
    }
  }

  /** Keep a worker's stats when they are numbers (they set its memory budget); else retire it. */
  private readStats(stats: unknown): boolean {
    const read = this.guard.readStats(stats, this.prefixes.count, this.pending.preparing);
    if (typeof read === "string") {
      this.retire("ERR_INSTANCE_RESET", read);
      return false;
    }
    this.engineStats = read;
    return true;
  }

  private take(id: number): Pending | undefined {
    const pending = this.pending.get(id);
    if (!pending) return undefined;
    this.pending.delete(id);
    if (pending.oneOff) this.pending.releasing.add(pending.memoryMb * 1024 * 1024);
    clearTimeout(pending.timer);
    this.lastUsed = performance.now();
    this.bridgeCalls.endFor(id);
    if (this.pending.size === 0) this.setHeld(false);
    const owner = pending.owner;
    if (owner !== undefined && this.prefixes.isDraining(owner) && !this.pending.callerOf(owner)) this.prefixes.drained(owner);
    return pending;
  }

  private decode(text: string): RunResult {
    return resultOfAnswer(text) ?? this.unreadable();
  }

  private completed(valueText: string, run: unknown): RunResult {
    return resultOfValue(this.engine, valueText, run) ?? this.unreadable();
  }

  /** An answer that is not what it must be: this worker is retired, and this one run fails. */
  private unreadable(): RunResult {
    this.retire("ERR_INSTANCE_RESET", "protocol error: an unreadable result");
    return this.failure("ERR_INSTANCE_RESET", "the worker's answer could not be read");
  }

  private heard(): void {
    this.lastHeard = performance.now();
    this.heldAtHeard = loopHeldMs();
  }

  private died(code: number | null, signal: NodeJS.Signals | null, error?: string): void {
    if (this.dead) return;
    this.dead = true;
    this.unwatchLoop();
    this.statm?.close();
    const cause = this.deathCause || error || `the worker process exited (code ${code}, signal ${signal})`;
    for (const [id, pending] of this.pending) {
      clearTimeout(pending.timer);
      this.pending.delete(id);
      const neighbour = this.culprit !== undefined && id !== this.culprit;
      pending.resolve(deathResult(this.engine, this.deathCode ?? "ERR_INSTANCE_RESET", cause, neighbour));
    }
    this.prefixes.clear();
    this.bridgeCalls.endAll();
    try {
      rmSync(this.dir, { recursive: true, force: true });
    } catch {}
    this.onExit?.(this, cause);
  }

  private aborted(reason: string): RunResult {
    return abortedResult(this.engine, "process", reason);
  }

  private failure(
    code: ErrorCode = this.deathCode ?? "ERR_INSTANCE_RESET",
    cause = this.deathCause || "the worker process is gone",
  ): RunResult {
    return lostResult(this.engine, code, cause);
  }
}
