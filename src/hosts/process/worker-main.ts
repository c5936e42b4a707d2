/**
 * A cordon worker process: runs one engine (v8 or quickjs) for a sandbox in another process and
 * speaks the host protocol (src/core/protocol.ts) over its stdin and stdout, in frames. Host
 * bindings stay with the sandbox: a guest's host call travels back over the pipe.
 *
 * Started by the process host with nothing of the host's environment (spawn.ts), a private working
 * directory and `--no-node-snapshot`. Raises its own oom_score_adj first, so the kernel's OOM killer picks a
 * worker before the host.
 */
import { rmSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { type BindingsLike, type BridgeAnswer, sharedCodec, TOO_LARGE } from "../../core/bindings.js";
import type { EnginePrefix, EngineStats } from "../../core/engine.js";
import { pollForRequests } from "../../core/busy-poll.js";
import { whenAborted } from "../../core/when-aborted.js";
import { encodeTextFrame, FrameReader } from "../../core/framing.js";
import type { ResolvedLimits } from "../../core/limits.js";
import { type HostEvent, type HostRequest, RUN_OVER_TEXT } from "../../core/protocol.js";
import { failedResult, isEmptyRecord } from "../../core/results.js";
import { LIMIT_CODES } from "../../core/errors.js";
import { closeInheritedDescriptors } from "../../core/inherited-fds.js";
import { esbuildOnThreads } from "../../core/esbuild-process.js";
import { AfterAnswers } from "./after-answers.js";
import { FrameGarbage } from "./frame-garbage.js";
import type { RunResult } from "../../core/types.js";
import type { PooledEngine, PooledEngineOptions } from "../../engines/pooled-engine.js";
import type { RssRule } from "./rss-budget.js";
import { callsOfRequest } from "./call-batch.js";
import { PipeOut } from "./pipe-out.js";
import { Shedder } from "./shedder.js";
import { ValueBatch } from "./value-batch.js";

export interface WorkerConfig {
  engine: "v8" | "quickjs";
  engineOptions: PooledEngineOptions;
  /** The host polls for answers, and this loop for requests in a stream, this long (core/busy-poll.ts); 0: off. */
  pipePollMs: number;
  /** The host's rule for this worker's memory budget: its warm instances are shed before reaching it. */
  rss: RssRule;
  /**
   * Start esbuild's service as the worker starts: the sandbox's runs have brought source imports,
   * which the worker compiles, and its first such run would otherwise wait for esbuild's start
   * (~100 ms, in its wall time). Without it, no worker runs esbuild (a client thread, a 13 MB
   * service process, ~160 ms of CPU).
   */
  startEsbuild?: boolean;
}

/** Bindings whose functions live in the sandbox's process: a call is a message and its answer. */
class RemoteBindings implements BindingsLike {
  constructor(
    readonly text: string,
    private readonly owner: number,
    private readonly call: (
      owner: number,
      fnId: number,
      argsText: string,
      signal?: AbortSignal,
      maxBytes?: number,
    ) => Promise<BridgeAnswer>,
  ) {}

  dispatch(fnId: number, argsText: string, signal?: AbortSignal, maxBytes?: number): Promise<BridgeAnswer> {
    return this.call(this.owner, fnId, argsText, signal, maxBytes);
  }
}

/**
 * A one-off run's cleanup here (disposing its isolate, 0.5-1.6 ms, then the spare's refill)
 * waits this long after its answer is written (its memory stays in the budget meanwhile, on both
 * sides: rss-budget.ts, ONE_OFF_RELEASE_MS). A pipe write is a synchronous wake-up: the kernel
 * may queue the host on this worker's core, to run once the writer sleeps, and on a machine whose
 * cores share no cache it mostly does (measured on this 2-vCPU VM: 62-86% of wake-ups). Disposing
 * at once then held the host off its answer: paced one-off p50 2.28-2.44 ms, p90 3.26-3.46;
 * waiting 3 ms, 2.12-2.18 and 2.48-2.69 (three pairs of runs).
 */
const CLEANUP_DELAY_MS = 3;

/** What a host call withdrawn before it left gets (the guest's run or call is over). */
const RUN_OVER: BridgeAnswer = { ok: false, text: RUN_OVER_TEXT };

/** How stale the stats the host holds may get while a worker is busy. */
const STATS_EVERY_MS = 100;

async function main(): Promise<void> {
  // First: what the host inherited from its own parent is not this worker's to keep.
  closeInheritedDescriptors();
  esbuildOnThreads();
  try {
    writeFileSync("/proc/self/oom_score_adj", "1000");
  } catch {
    // Not Linux, or /proc is not writable: the host's watchdog still applies.
  }
  // Ctrl-C and a terminal's hang-up reach the whole process group, this worker included: the
  // host drains its runs on them (cordon serve) and ends its workers itself, so they go on.
  for (const signal of ["SIGINT", "SIGHUP"] as const) process.on(signal, () => {});
  // stdout carries the protocol: nothing else may write to it.
  console.log = console.info = console.debug = (...args: unknown[]) => process.stderr.write(`${args.join(" ")}\n`);

  const config = JSON.parse(process.argv[2] ?? "{}") as WorkerConfig;
  if (config.startEsbuild === true) (await import("../../core/esbuild-calls.js")).startEsbuild();
  let answering = 0;
  // A spare isolate is made again after the answers in progress are written, never ahead of them.
  const afterAnswers = new AfterAnswers(() => answering === 0);
  const garbage = new FrameGarbage(() => answering === 0);
  // The engine never polls here (its busyPollMs is 0): with the pipe polled as well, a call would
  // pass three threads, two of them spinning, on a 2-core machine (decision 012).
  const engineOptions = { ...config.engineOptions, cleanupDelayMs: CLEANUP_DELAY_MS };
  const engine: PooledEngine =
    config.engine === "quickjs"
      ? (await import("../../engines/quickjs/engine.js")).createQuickJSEngine(engineOptions)
      : // Quick warm calls run on this thread: it serves no caller (decision 012).
        (await import("../../engines/v8/engine.js")).createV8Engine({ ...engineOptions, syncCalls: true }, () =>
          afterAnswers.wait(),
        );

  // Before a run that a limit ended is answered, its disposed guest has stopped, or the host has
  // been told it cannot be (v8 only): the host then gives this worker no new work, the next run
  // included, and ends it when its runs are done.
  let guestsStopped = (): Promise<void> => Promise.resolve();
  if (config.engine === "v8") {
    const isolates = await import("../../engines/v8/isolates.js");
    guestsStopped = async () => {
      // The instance is disposed as its run settles: after this turn, not before.
      await new Promise((resolve) => setImmediate(resolve));
      await isolates.disposedGuestsStopped();
    };
    isolates.onUnstoppableGuest((reason) => {
      isolates.onUnstoppableGuest(undefined);
      send({ t: "unsound", reason }, undefined);
    });
  }

  const { budgetBytes, maxInstances } = config.engineOptions;
  const shedder = new Shedder(engine, { rule: config.rss, budgetBytes, maxInstances });

  // Frames sent in one tick leave in one write; while the host reads slower than this worker
  // writes, they wait in lanes (pipe-out.ts): a run's, or its prefix's, as the host's requests do.
  // A frame written is garbage here once handed to the pipe, not before (it may wait in a lane).
  const out = new PipeOut((bytes) => garbage.moved(bytes));
  out.attach(process.stdout);
  /** Each prefix's lane: the id of the prepare that made it, which its host calls name too. */
  const prefixLanes = new Map<number, number>();
  const laneOfPrefix = (prefix: number, id: number) => prefixLanes.get(prefix) ?? id;
  let flushing = false;
  const flushValues = () => {
    flushing = false;
    values.flush();
  };
  const flushWhenTickEnds = () => {
    if (flushing) return;
    flushing = true;
    process.nextTick(flushValues);
  };
  // A frame over the pipe's limit throws here, before anything is written: the pipe stays in step.
  const write = (event: HostEvent, lane: number | undefined) => out.write(encodeTextFrame(event), lane);
  // Value answers made in one tick leave in one frame per lane, when the tick ends (or before any other event).
  const values = new ValueBatch(write);
  /**
   * `lane`: frame-lanes.ts; none for frames no other needs to precede (stats, unsound). Returns
   * the frame while it waits for the pipe (PipeOut.write).
   */
  const send = (event: HostEvent, lane: number | undefined) => {
    values.flush();
    return write(event, lane);
  };
  /**
   * Send an answer built from a guest's value: one too large for a frame (a maxOutputBytes over
   * 64 MiB allows it) fails its request with ERR_OUTPUT_TOO_LARGE, never the worker.
   */
  const sendAnswer = (event: Extract<HostEvent, { t: "value" | "result" | "prepared" }>, lane: number) => {
    if (ValueBatch.takes(event)) {
      values.add(event, lane);
      flushWhenTickEnds();
      return;
    }
    try {
      send(event, lane);
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      const resultText = encodeResult(
        failedResult(config.engine, "process", {
          code: "ERR_OUTPUT_TOO_LARGE",
          name: "CordonError",
          message: `the result is too large for the pipe to the host: ${error.message}`,
        }),
      );
      if (event.t === "prepared") {
        if (event.prefix !== undefined) {
          prefixes.get(event.prefix)?.dispose();
          prefixes.delete(event.prefix);
          shedder.dropped(event.prefix);
        }
        send({ ...event, prefix: undefined, resultText }, lane);
      } else send({ t: "result", id: event.id, resultText, stats: event.stats }, lane);
    }
  };
  const aborts = new Map<number, AbortController>();
  const prefixes = new Map<number, EnginePrefix>();
  /** Each prefix's call limits: a call carries them only when they changed (protocol.ts). */
  const callLimits = new Map<number, ResolvedLimits>();
  const bridge = new Map<number, (answer: BridgeAnswer) => void>();
  let nextCid = 0;
  let nextPrefix = 0;

  const bridgeCall = (owner: number, fnId: number, argsText: string, signal?: AbortSignal, maxBytes?: number) =>
    new Promise<BridgeAnswer>((resolve) => {
      const cid = ++nextCid;
      // The run's maxBridgeCallBytes (a finite number; JSON has no Infinity): the host refuses a longer answer.
      const limit = Number.isFinite(maxBytes) ? maxBytes : undefined;
      let waiting: ReturnType<typeof send>;
      try {
        waiting = send({ t: "bridge-call", id: owner, cid, fnId, argsText, maxBytes: limit }, owner);
      } catch (error) {
        // Arguments too large for a frame (a maxBridgeCallBytes over 64 MiB allows them).
        if (!(error instanceof RangeError)) throw error;
        resolve(TOO_LARGE);
        return;
      }
      // The run or call ended first: the host stops the call (a fetch's exchange) too. One still
      // waiting for the pipe never leaves: the host would refuse it once the run's answer is in.
      // Sent, 40 runs that each started 150 calls of 300 KB and returned held their answers, and
      // every neighbour's, behind 1.8 GB of arguments for the dead (red team: the worker was
      // ended at 42 s, 47 requests failing).
      let detach = () => {};
      bridge.set(cid, (answer) => {
        detach();
        resolve(answer);
      });
      // (Set after the answer's entry: it may fire at once, for a signal aborted already.)
      detach = whenAborted([signal], () => {
        if (waiting && out.withdraw(waiting)) {
          bridge.delete(cid);
          resolve(RUN_OVER);
        } else send({ t: "bridge-cancel", cid }, owner);
      });
    });

  // Every Request and Response here was decoded from the engine's guest, with its body's bytes
  // (fetch-wire.ts): it crosses on from any depth, with no body to read first.
  const encodeResult = (result: RunResult): string => sharedCodec().encode(result, "result");
  const encodeValue = (value: unknown): string => sharedCodec().encode(value, "result.value");

  /**
   * The engine's stats ride on an answer only when the host does not hold them already: when
   * they changed and the answer leaves this worker idle (so a caller that reads stats() between
   * requests sees them exact), or, while busy, at most every STATS_EVERY_MS. They list every
   * prefix: built and sent with each answer, they halved a busy worker's calls per second with
   * 200 prefixes prepared (17.7k/s -> 8.5k/s) and added 140 µs to a sequential call.
   */
  // After answering a request the sandbox polls for, this loop turns, so the next one is read
  // without a wake-up; never while a request is in progress (an engine thread computing it needs
  // the core).
  const poller = pollForRequests(config.pipePollMs, () => answering === 0);
  let statsSentAt = Number.NEGATIVE_INFINITY;
  let statsSent: EngineStats | undefined;
  const sending = (stats: EngineStats): EngineStats => {
    statsSent = stats;
    statsSentAt = performance.now();
    return stats;
  };
  const currentStats = (): EngineStats => sending(engine.stats());
  const statsWithAnswer = (): EngineStats | undefined => {
    if (answering > 0 && performance.now() - statsSentAt < STATS_EVERY_MS) return undefined;
    const stats = engine.stats();
    return statsSent && sameStats(stats, statsSent) ? undefined : sending(stats);
  };

  /**
   * Answer request `id` in `lane` (its own, or its prefix's). Only an abortable request gets a
   * signal: calls without one may coalesce. `oneOff`: a run whose instance is disposed after its
   * answer (its memory is released later).
   */
  const answer = async (
    id: number,
    lane: number,
    abortable: boolean | undefined,
    memoryMb: number | undefined,
    work: (signal: AbortSignal | undefined) => Promise<RunResult>,
    oneOff = false,
  ) => {
    const controller = abortable ? new AbortController() : undefined;
    if (controller) aborts.set(id, controller);
    answering++;
    shedder.began(id, memoryMb ?? 0);
    let event: Extract<HostEvent, { t: "value" | "result" }>;
    try {
      const result = await work(controller?.signal).catch(internalFailure);
      if (!result.ok && LIMIT_CODES.has(result.error.code)) await guestsStopped();
      // A guest's value that cannot be encoded here fails its own request, never the worker,
      // which other tenants' requests share.
      event = await answerEvent(id, result).catch((error: unknown) => answerEvent(id, unencodable(error)));
    } catch (error) {
      event = await answerEvent(id, internalFailure(error));
    } finally {
      answering--;
      aborts.delete(id);
      shedder.answered(id, oneOff);
    }
    // Asked once this request no longer counts as in progress: an answer that leaves the
    // worker idle carries exact stats.
    event.stats = statsWithAnswer();
    sendAnswer(event, lane);
    // The last answer in progress leaves now, not after this tick's other promise reactions (a
    // paced one-off's answer waited 0.13 ms for them, p50): no frame of this tick can join it.
    if (answering === 0) {
      values.flush();
      out.uncork();
    }
    poller.answered();
    afterAnswers.answered();
    garbage.answered();
  };

  /** The answer to request `id`: the bare value when that is all the result holds, else the whole result. */
  const answerEvent = async (id: number, result: RunResult): Promise<Extract<HostEvent, { t: "value" | "result" }>> => {
    if (result.ok && result.logs.length === 0 && result.skippedExports.length === 0 && isEmptyRecord(result.exports)) {
      const valueText = encodeValue(result.value);
      const { wallMs, cpuMs, heapUsedBytes, bridgeCalls, warm } = result.stats;
      // Finite numbers only: JSON would turn a NaN into null, which the host rejects.
      const run = [
        finite(wallMs),
        finite(cpuMs),
        heapUsedBytes === undefined ? -1 : finite(heapUsedBytes),
        finite(bridgeCalls),
        warm ? 1 : 0,
      ];
      return { t: "value", id, valueText, run };
    }
    return { t: "result", id, resultText: encodeResult(result) };
  };

  const handle = (message: HostRequest) => {
    if (message.t !== "bridge-result" && message.t !== "abort") afterAnswers.heard();
    switch (message.t) {
      case "run": {
        poller.heard(message.poll);
        const bindings = new RemoteBindings(message.bindingsText, message.id, bridgeCall);
        const { source, sourceImports, inputText, limits, mode } = message;
        void answer(
          message.id,
          message.id,
          message.abortable,
          limits.memoryMb,
          (signal) => engine.run({ source, sourceImports, bindings, inputText, limits, signal, host: "process", mode }),
          true,
        );
        return;
      }
      case "prepare": {
        const bindings = new RemoteBindings(message.bindingsText, message.id, bridgeCall);
        const { key, source, sourceImports, limits } = message;
        shedder.began(message.id, limits.memoryMb);
        void engine
          .prepare({ key, source, sourceImports, bindings, limits, host: "process" })
          .then(async ({ prefix, result }) => {
            let resultText: string;
            try {
              resultText = encodeResult(result);
            } catch (error) {
              // Not held: a prefix whose result cannot reach the host is no prefix there.
              prefix.dispose();
              result = unencodable(error);
              resultText = encodeResult(result);
            }
            let handle: number | undefined;
            if (result.ok) {
              handle = ++nextPrefix;
              prefixes.set(handle, prefix);
              prefixLanes.set(handle, message.id);
              shedder.holding(handle, limits.memoryMb, message);
            }
            shedder.answered(message.id);
            sendAnswer({ t: "prepared", id: message.id, prefix: handle, resultText, stats: currentStats() }, message.id);
          })
          .catch((error: unknown) => {
            shedder.answered(message.id);
            const resultText = sharedCodec().encode(internalFailure(error), "result");
            send({ t: "prepared", id: message.id, prefix: undefined, resultText, stats: currentStats() }, message.id);
          });
        return;
      }
      case "prefix-run": {
        poller.heard(message.poll);
        const prefix = prefixes.get(message.prefix);
        const { source, inputText, limits } = message;
        void answer(message.id, laneOfPrefix(message.prefix, message.id), message.abortable, limits.memoryMb, (signal) =>
          prefix ? prefix.run({ source, sourceImports: {}, inputText, limits, signal }) : Promise.resolve(gone(config.engine)),
        );
        return;
      }
      case "prefix-call": {
        poller.heard(message.poll);
        const prefix = prefixes.get(message.prefix);
        if (prefix && message.limits) callLimits.set(message.prefix, message.limits);
        const limits = callLimits.get(message.prefix);
        if (prefix && !limits) return protocolError(`a call to prefix ${message.prefix} without limits`);
        const { path, argsText } = message;
        void answer(message.id, laneOfPrefix(message.prefix, message.id), message.abortable, limits?.memoryMb, (signal) =>
          prefix && limits ? prefix.call({ path, argsText, limits, signal }) : Promise.resolve(gone(config.engine)),
        );
        return;
      }
      case "prefix-calls": {
        const calls = callsOfRequest(message);
        if (!calls) return protocolError("a prefix-calls request whose ids and arguments do not line up");
        for (const call of calls) handle(call);
        return;
      }
      case "prefix-dispose":
        prefixes.get(message.prefix)?.dispose();
        prefixes.delete(message.prefix);
        prefixLanes.delete(message.prefix);
        shedder.dropped(message.prefix);
        callLimits.delete(message.prefix);
        return;
      case "abort":
        aborts.get(message.id)?.abort(message.reason);
        return;
      case "bridge-result": {
        const resolve = bridge.get(message.cid);
        bridge.delete(message.cid);
        resolve?.({ ok: message.ok, text: message.text, tooLarge: message.tooLarge === true });
        return;
      }
      case "stats":
        send({ t: "stats", id: message.id, stats: currentStats() }, undefined);
        return;
      default:
        protocolError(`unknown message type ${JSON.stringify((message as { t?: unknown }).t)}`);
    }
  };

  /** A result that cannot be encoded for the host (a value nested too deep, too large). */
  const unencodable = (error: unknown): RunResult => {
    const code = (error as { code?: unknown })?.code === "ERR_OUTPUT_TOO_LARGE" ? "ERR_OUTPUT_TOO_LARGE" : "ERR_NOT_SERIALIZABLE";
    return failedResult(config.engine, "process", {
      code,
      name: "TypeError",
      message: String((error as Error)?.message ?? error),
    });
  };
  /** The engine failed where it never should: this request fails, the worker stays. */
  const internalFailure = (error: unknown): RunResult =>
    failedResult(config.engine, "process", {
      code: "ERR_INTERNAL",
      name: "CordonError",
      message: `the worker could not serve the request: ${String((error as Error)?.message ?? error)}`,
    });

  const protocolError = (reason: string) => {
    process.stderr.write(`cordon worker: protocol error: ${reason}\n`);
    process.exit(70);
  };
  const reader = new FrameReader((message, bytes) => {
    garbage.moved(bytes);
    handle(message as HostRequest);
  }, protocolError);
  process.stdin.on("data", (chunk: Buffer) => reader.push(chunk));
  // The sandbox went away (its end of the pipe closed, or its process died): so does the worker, at
  // once. process.exit waits for the isolates' threads, and a guest spinning in one kept an orphan
  // at 100% CPU past its limits (whose timers this thread no longer ran); SIGKILL waits for nothing.
  const parent = process.ppid;
  const orphaned = () => {
    // The host made this directory and would have removed it; a small rmSync cannot hang.
    try {
      if (basename(process.cwd()).startsWith("cordon-worker-")) rmSync(process.cwd(), { recursive: true, force: true });
    } catch {}
    process.kill(process.pid, "SIGKILL");
  };
  process.stdin.on("end", orphaned);
  // A backstop should the pipe outlive the host (a descriptor inherited elsewhere): a new parent.
  setInterval(() => {
    if (process.ppid !== parent) orphaned();
  }, 500).unref();
  // Ready once the engine's spare instances exist: their memory is part of the calibrated base.
  for (let waited = 0; waited < 3000 && engine.stats().spareInstances < config.engineOptions.spares; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const base = process.memoryUsage.rss();
  send({ t: "ready", pid: process.pid, rssBytes: base }, undefined);
  shedder.start(base);
}

function sameStats(a: EngineStats, b: EngineStats): boolean {
  const totals = ["warmInstances", "idleInstances", "idleHeapBytes", "budgetBytes", "spareInstances"] as const;
  if (totals.some((key) => a[key] !== b[key]) || a.prefixes.length !== b.prefixes.length) return false;
  return a.prefixes.every((p, i) => {
    const q = b.prefixes[i];
    return p.key === q.key && p.warm === q.warm && p.idle === q.idle && p.busy === q.busy && p.queued === q.queued;
  });
}

function gone(engine: "v8" | "quickjs"): RunResult {
  const message = "the prefix is no longer held by this worker";
  return failedResult(engine, "process", { code: "ERR_INSTANCE_RESET", name: "CordonError", message });
}

function finite(n: number): number {
  return Number.isFinite(n) ? n : 0;
}

void main();
