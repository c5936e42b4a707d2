import type * as IVM from "isolated-vm";
import { availableParallelism } from "node:os";
import { pollMemory, spinsUntilSettled } from "../../core/busy-poll.js";
import { CordonError } from "../../core/errors.js";
import { CHANNEL_LAYOUT } from "../guest/serve.js";
import type { RuntimeCaps } from "../instance.js";
import type { IsolatedVm } from "./load.js";

/**
 * The host side of a warm call channel over shared memory (the guest side is
 * engines/guest/serve.ts). In a stream of calls to one instance, the guest runtime runs a
 * serving task that spins on the isolate's thread, and each call is written to shared memory
 * and its answer read back from it: no isolated-vm crossing, so no thread wake-up. Measured
 * with raw isolated-vm here: a round trip of 1.9 µs p50 against 95 µs for an async `apply`,
 * ~20 µs of which is `apply` itself waking the isolate's thread (a futex wake, which on this
 * VM is an inter-processor interrupt).
 *
 * The layout is CHANNEL_LAYOUT (engines/guest/serve.ts).
 */
/** The channel's states. */
const S = CHANNEL_LAYOUT.state;
const HEADER_BYTES = CHANNEL_LAYOUT.headerBytes;
/** 64 KB per instance that serves: calls with more text cross the usual way. */
const MEMORY_BYTES = 64 * 1024;
const CAPACITY = (MEMORY_BYTES - HEADER_BYTES) / 2;
/** Calls with more text than this cross the usual way (see `fits`). */
const MAX_CALL_CHARS = 8192;

/** `closed`: the serving task ended with this answer (a call returned a promise, or it was asked to end). */
export type Answer = { text: string; closed?: true } | { tooBig: true } | undefined;

/**
 * Serving tasks spin on a core while they wait; with this thread's loop polling too, more than
 * one per spare core would take cores from the isolates doing work.
 */
const MAX_SERVING = Math.max(1, availableParallelism() - 1);
let servingTasks = 0;

export class CallChannel {
  private readonly memory = new SharedArrayBuffer(MEMORY_BYTES);
  private readonly ctl = new Int32Array(this.memory, 0, CHANNEL_LAYOUT.headerBytes / 4);
  private readonly bytes = Buffer.from(this.memory);
  /** The serving task, while it runs; it settles with an answer too big for the memory. */
  private task: Promise<string | undefined> | undefined;
  private lastTask: Promise<string | undefined> | undefined;
  /** Why the serving task ended abnormally (the isolate was disposed, the guest runtime threw). */
  private failure: unknown;
  private reading = false;

  constructor() {
    Atomics.store(this.ctl, 0, S.closed);
  }

  get serving(): boolean {
    return this.task !== undefined;
  }

  /**
   * The serving task, when its loop is over but the task has not ended: it is running its
   * microtask checkpoint, what the calls it served left queued (a chain a synchronous export did
   * not await). Undefined while it serves or an answer is being read, and once it has ended.
   */
  get endingTask(): Promise<unknown> | undefined {
    if (this.task === undefined || this.reading) return undefined;
    const state = Atomics.load(this.ctl, 0);
    return state === S.closed || state === S.answerClosed || state === S.tooBig ? this.task : undefined;
  }

  /** May another serving task start in this thread? */
  static canOpen(): boolean {
    return servingTasks < MAX_SERVING;
  }

  /**
   * Small calls only: the guest reads text from shared memory in JavaScript (~7 ns a character
   * here), slower than isolated-vm's native copy once it is large. Sequential p50, served vs
   * crossing: 1,000 characters 32 vs 144 µs, 16,000 121 vs 202, 30,000 226 vs 246; and served
   * 25 KB batches of 32 events lowered events/s, as the isolate's thread is their bottleneck.
   */
  fits(path: string, joined: string): boolean {
    return path.length + joined.length <= MAX_CALL_CHARS;
  }

  /** Start the serving task (the state must be S.closed: no task runs); `track` counts it as guest code running. */
  open(
    serve: IVM.Reference<(...args: unknown[]) => unknown>,
    ivm: IsolatedVm,
    windowMs: number,
    track: (task: Promise<string | undefined>) => Promise<string | undefined>,
  ): void {
    this.failure = undefined;
    Atomics.store(this.ctl, 1, 1);
    Atomics.store(this.ctl, 0, S.idle);
    const memory = new ivm.ExternalCopy(this.memory).copyInto({ release: true });
    const task = track(
      serve.apply(undefined, [memory, windowMs, CAPACITY], { result: { promise: true } }) as Promise<string | undefined>,
    );
    this.task = task;
    this.lastTask = task;
    servingTasks++;
    spinsUntilSettled(task);
    task.then(
      () => {
        servingTasks--;
        if (this.task === task) this.task = undefined;
      },
      (error: unknown) => {
        servingTasks--;
        // A task that ended before the one serving now (see `reopen`) says nothing about it.
        if (this.task !== task) return;
        this.failure = error;
        this.task = undefined;
      },
    );
  }

  /**
   * Queue the next serving task behind the one that has just answered and is ending (after a
   * call that returned a promise, serve.ts): it starts as soon as that one's microtask
   * checkpoint is over, on a thread still awake, so the stream's next call does not pay for
   * waking it. Not counted against canOpen: the two never run at once. Returns what `ended`
   * would have for the task that is ending.
   */
  reopen(
    serve: IVM.Reference<(...args: unknown[]) => unknown>,
    ivm: IsolatedVm,
    windowMs: number,
    track: (task: Promise<string | undefined>) => Promise<string | undefined>,
  ): Promise<unknown> {
    const ending = this.ended();
    if (this.mayOpen) this.open(serve, ivm, windowMs, track);
    return ending;
  }

  /**
   * May a new serving task open now: none runs and a core is spare (canOpen), or the one that
   * runs has closed the channel (idle, asked, or after a promise) and is ending — the new one
   * queues behind it, and the two never run at once.
   */
  get mayOpen(): boolean {
    if (this.reading) return false;
    return this.task === undefined ? CallChannel.canOpen() : Atomics.load(this.ctl, 0) === S.closed;
  }

  /** An answer is still to be read: the channel takes no other call (nor a new task) meanwhile. */
  get awaiting(): boolean {
    return this.reading;
  }

  /** The serving task has written the answer being waited for; this thread has not read it yet. */
  get answered(): boolean {
    if (!this.reading) return false;
    const state = Atomics.load(this.ctl, 0);
    return state === S.answer || state === S.answerClosed || state === S.tooBig;
  }

  /**
   * Send a call to the serving task and read its answer (the loop busy-polls meanwhile).
   * Undefined when the task has just ended: the caller crosses the usual way.
   */
  call(path: string, joined: string, caps: RuntimeCaps | undefined, windowMs: number): Promise<Answer & object> | undefined {
    if (this.reading || !this.send(path, joined, caps)) return undefined;
    // Read until this call's own answer is taken, even after its execution settled another way
    // (a promise's outcome arrives through onDone): a later call must never read this answer.
    this.reading = true;
    const done = () => {
      this.reading = false;
    };
    const taken = this.ctl[CHANNEL_LAYOUT.taken];
    const begun = () => Atomics.load(this.ctl, CHANNEL_LAYOUT.taken) !== taken;
    const answer = pollMemory(() => this.answer(), windowMs, begun);
    answer.then(done, done);
    return answer;
  }

  /**
   * Write a call for the serving task. False when it has just ended (the caller opens a new
   * one, or crosses the usual way).
   */
  private send(path: string, joined: string, caps: RuntimeCaps | undefined): boolean {
    if (Atomics.load(this.ctl, 0) !== S.idle) return false;
    this.bytes.write(path, HEADER_BYTES, "utf16le");
    this.bytes.write(joined, HEADER_BYTES + path.length * 2, "utf16le");
    this.ctl[2] = path.length;
    this.ctl[3] = joined.length;
    this.ctl[4] = caps ? 1 : 0;
    if (caps) {
      this.ctl[5] = caps[0];
      this.ctl[6] = caps[1];
      this.ctl[7] = caps[2];
      this.ctl[8] = caps[3];
    }
    // The task may be closing at this very moment: only a request written while it is idle counts.
    return Atomics.compareExchange(this.ctl, 0, S.idle, S.request) === S.idle;
  }

  /** The answer once it is there (undefined before); throws if the serving task failed. */
  private answer(): Answer {
    const state = Atomics.load(this.ctl, 0);
    if (state === S.answer || state === S.answerClosed) {
      const length = this.ctl[3];
      const text = this.bytes.toString("utf16le", HEADER_BYTES, HEADER_BYTES + length * 2);
      // The task may close (S.answer -> S.answerClosed) while this reads: only an answer still
      // open goes back to S.idle, or a later request would wait for a task that has ended.
      if (state !== S.answer || Atomics.compareExchange(this.ctl, 0, S.answer, S.idle) !== S.answer) {
        Atomics.store(this.ctl, 0, S.closed);
        return { text, closed: true };
      }
      return { text };
    }
    if (state === S.tooBig) {
      Atomics.store(this.ctl, 0, S.closed);
      return { tooBig: true };
    }
    if (this.task === undefined && state === S.request) {
      throw this.failure ?? new CordonError("ERR_INSTANCE_RESET", "the instance stopped serving calls");
    }
    return undefined;
  }

  /**
   * Settles when the last serving task has ended: its microtask checkpoint (what the calls it
   * served left queued, a returned promise's continuation) has run by then. Resolves with what
   * the task failed with, if it failed.
   */
  ended(): Promise<unknown> {
    return (this.lastTask ?? Promise.resolve()).then(
      () => undefined,
      (error: unknown) => error ?? new Error("the serving task failed"),
    );
  }

  /** The serving task's result: the answer that did not fit. */
  async bigAnswer(): Promise<string> {
    const text = await this.lastTask;
    if (typeof text !== "string") throw new CordonError("ERR_INTERNAL", "the answer that did not fit was not returned");
    return text;
  }

  /** Ask the serving task to end (before any other crossing: isolated-vm queues it behind). */
  close(): void {
    Atomics.store(this.ctl, 1, 0);
  }
}
