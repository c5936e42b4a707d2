import type { BindingsLike } from "../core/bindings.js";
import { mapTexts } from "../core/joined-texts.js";
import type { RunMode } from "../core/engine.js";
import type { LineMap } from "../core/source-map.js";
import type { CompileBound } from "../core/esbuild-calls.js";
import type { GuestSource } from "../core/source.js";

/** What an execution receives from the guest runtime's synchronous callbacks. */
export interface InstanceListener {
  onLog(level: string, message: string, index?: number): void;
  onCall(id: number, fnId: number, argsText: string): void;
  onTimer(id: number, ms: number): void;
  onDone(kind: string, text: string, index?: number): void;
  /**
   * A call crossing's outcomes (joined by U+0001, "p" for each still to come) as they arrive,
   * before they are read, for engines whose failures come as separate events (deno): a failure
   * reported after them does not undo them.
   */
  onReturned?(joined: string): void;
  /** Guest code threw past the runtime (engines that report such failures as events). */
  onFailure?(error: unknown): void;
  /** A task in the guest ended (v8): what it wrote to the outbox is due, a timer set in it above all. */
  onTaskEnd?(): void;
}

/** What an instance's outbox hands over (drainOutbox): `epochMs` is when the guest wrote it (its Date.now()). */
export interface OutboxReader {
  log(level: string, message: string, index: number, epochMs: number): void;
  /** A timer set (`ms`: its delay from `epochMs`) or cleared (`ms` -1). */
  timer(id: number, ms: number, epochMs: number): void;
}

/**
 * A call crossing whose task failed as it ended, after the call had returned `outcomes`
 * (joined by U+0001, "p" for each still to come): isolated-vm throws what rejected a promise
 * nothing handled at that point. The outcomes made stand; `failure` fails the calls still
 * waiting for theirs (Execution.taskFailed).
 */
export class FailedAfterReturning extends Error {
  constructor(
    readonly outcomes: string,
    readonly failure: unknown,
  ) {
    super("the call's task failed after the call returned");
  }
}

/** Caps the guest runtime enforces itself: maxOutputBytes, maxLogEntries, maxLogBytes, maxBridgeCallBytes. */
export type RuntimeCaps = [number, number, number, number];

/**
 * Are these the caps an instance's previous crossing sent? A call sends its caps only when they
 * changed: every argument costs on the host's thread, and a stream of calls repeats them.
 */
export function sameCaps(previous: RuntimeCaps | undefined, caps: RuntimeCaps): boolean {
  return (
    previous !== undefined &&
    previous[0] === caps[0] &&
    previous[1] === caps[1] &&
    previous[2] === caps[2] &&
    previous[3] === caps[3]
  );
}

/**
 * Joined call outcomes (core/joined-texts.ts) with only the thrown ones ("t…") renamed: a
 * value comes back exactly as the guest made it, a stack may name the engine's own files.
 */
export function renameThrownOutcomes(joined: string, rename: (thrown: string) => string): string {
  return mapTexts(joined, (outcome) => (outcome[0] === "t" ? rename(outcome) : outcome));
}

export interface EvaluateRequest {
  /** Installed on a fresh instance; undefined on a warm one (it keeps its prefix's bindings). */
  bindings?: BindingsLike;
  mode: RunMode;
  inputText: string;
  caps: RuntimeCaps;
  source: GuestSource;
  sourceImports: Record<string, string>;
  /** What bounds compiling the source imports: the run's wall time and signal. */
  compile?: CompileBound;
}

/**
 * One guest realm with the cordon runtime bootstrapped in it: a V8 isolate, or a QuickJS
 * runtime in a worker thread. One execution owns an instance at a time. Every engine's instance
 * offers the same operations, so executions, spares and warm pools are shared code.
 */
export interface EngineInstance {
  listener: InstanceListener | undefined;
  bindings: BindingsLike | undefined;
  /** A fired limit, an abort or a crash: never reuse. */
  tainted: boolean;
  /** A warm instance is replaced after this many uses (Deno: each prefix run adds a module instance it never frees). */
  readonly maxUses?: number;
  readonly disposed: boolean;
  readonly memoryMb: number;
  /** Source maps by module filename, so failures report the caller's own lines. */
  readonly lineMaps: Map<string, LineMap>;
  /** A stack from this instance with its modules under the guest's own names (deno: paths in its private directory). */
  guestNames?(stack: string): string;
  heapUsedBytes: number;
  uses: number;
  lastUsed: number;
  /** CPU time the guest has used in this instance so far, in nanoseconds. */
  cpuTimeNs(): bigint;
  /**
   * The guest's CPU time is spent in this process (an isolate's or a worker thread's): this
   * process's own CPU time then bounds it (Execution.cpuMs). Not a Deno child process.
   */
  readonly cpuInProcess?: boolean;
  /**
   * Evaluate a module and call its default export (run) or keep its exports (prepare). Calls
   * `startCpu` when guest code is about to run. The outcome arrives through listener.onDone;
   * the promise rejects with what evaluation threw.
   */
  evaluate(request: EvaluateRequest, startCpu: () => void): Promise<void>;
  /**
   * Call an export of the prepared prefix once per argument list; resolves with the joined outcomes.
   * `blockForMs`: the caller allows this crossing to run synchronously on this thread, stopped
   * after that long (v8 in a process worker, made with `syncCalls`; other instances ignore it).
   * `leftoverMs`: how long what the call leaves queued may run once its answer is out, where an
   * engine answers before that has run (v8's shared-memory calls); the call's wall time.
   */
  call(path: string, argsTexts: string[], caps: RuntimeCaps, blockForMs?: number, leftoverMs?: number): Promise<string>;
  settle(id: number, ok: boolean, text: string): Promise<unknown>;
  fire(id: number): Promise<unknown>;
  /** Resolves once the instance has finished everything queued before it. */
  ping(): Promise<unknown>;
  measureHeap(): Promise<number>;
  /**
   * Hand `reader` the log lines and timer changes the guest wrote without crossing (v8's outbox),
   * in order. An execution reads them when a guest task ends (InstanceListener.onTaskEnd), before
   * anything that crosses, and before a call settles.
   */
  drainOutbox?(reader: OutboxReader): void;
  /** Wake the thread this instance runs on, if it has one of its own that may be asleep. */
  wake?(): void;
  /**
   * The thread this instance shares is held by another guest that was stopped and has not
   * answered since (quickjs): work given to it now waits, and dies with the thread if it is stuck.
   */
  stalled?(): boolean;
  /**
   * Where the instance runs, when an engine fixes that at creation (quickjs: its worker thread).
   * A warm pool spreads a prefix's instances over sites, so their calls use every core.
   */
  readonly site?: object;
  /**
   * The guest has finished the current crossing and its outcome waits for this thread to read
   * it (v8's shared-memory calls): no limit may fire for time spent waiting on the host.
   */
  answerReady?(): boolean;
  dispose(): void;
}

/**
 * Wait until `instance` has finished what a run left queued (a ping crosses behind it), before
 * another run may own it. Past `wallTimeMs` it is tainted: whoever releases it then discards it.
 */
export async function fence(instance: EngineInstance, wallTimeMs: number): Promise<void> {
  if (instance.tainted || instance.disposed) return;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), wallTimeMs);
  });
  const outcome = await Promise.race([
    instance.ping().then(
      () => "idle" as const,
      () => "late" as const,
    ),
    late,
  ]);
  clearTimeout(timer);
  if (outcome === "late") instance.tainted = true;
}
