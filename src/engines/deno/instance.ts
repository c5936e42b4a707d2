import { posix } from "node:path";
import { type BindingsLike, sharedCodec } from "../../core/bindings.js";
import { CordonError } from "../../core/errors.js";
import { joinTexts } from "../../core/joined-texts.js";
import type { LineMap } from "../../core/source-map.js";
import {
  type EngineInstance,
  type EvaluateRequest,
  type InstanceListener,
  type RuntimeCaps,
  renameThrownOutcomes,
  sameCaps,
} from "../instance.js";
import { DEFAULT_DISK_MB, DiskWatch } from "./disk-watch.js";
import { frameProblem } from "./frames.js";
import { writeGraph } from "./modules.js";
import { HOST_DIR_PREFIX } from "./host-dirs.js";
import { DenoProcess, type DenoProcessOptions } from "./process.js";

/** RSS allowed above a process's resident size at start and its memory limit (V8's young generation, code, buffers). */
const RSS_SLACK_MB = 64;
const RSS_POLL_MS = 25;
/** CPU an idle process may use between runs (Deno's own GC and compilers), in total, before it is ended. */
const IDLE_CPU_NS = 300_000_000n;
const watched = new Set<DenoInstance>();
let rssTimer: NodeJS.Timeout | undefined;

/** The RSS watchdog: the V8 flag bounds the heap, not ArrayBuffers; this bounds the process. */
function watchRss(instance: DenoInstance, on: boolean): void {
  if (on) watched.add(instance);
  else watched.delete(instance);
  if (watched.size > 0 && !rssTimer) {
    rssTimer = setInterval(() => {
      for (const each of watched) each.checkRss();
    }, RSS_POLL_MS);
    rssTimer.unref();
  } else if (watched.size === 0 && rssTimer) {
    clearInterval(rssTimer);
    rssTimer = undefined;
  }
}

/**
 * The host's handle on one Deno process with the cordon runtime bootstrapped in it. It offers the
 * operations every engine instance offers, so executions, spares and warm pools are shared code.
 */
export class DenoInstance implements EngineInstance {
  private current: InstanceListener | undefined;
  bindings: BindingsLike | undefined;
  tainted = false;
  heapUsedBytes = 0;
  uses = 0;
  lastUsed = performance.now();
  readonly lineMaps = new Map<string, LineMap>();
  /** A function's own process: every run starts from the globals the bootstrap left (secrets never stay). */
  resetEachRun = false;
  /** Which function (code, files, limits) this process serves, once it serves one. */
  functionKey: string | undefined;
  private gone = false;
  /** While no run owns the process: its CPU time when the last one ended. */
  private idleSince: { cpu: bigint } | undefined;
  private seq = 0;
  /** Numbers each run and call sent: what the process sends back names its `work` (see route). */
  private work = 0;
  /** Requests awaiting their reply; `call`: a call's, whose reply is its outcomes. */
  private readonly replies = new Map<number, { resolve(value: unknown): void; reject(error: Error): void; call?: boolean }>();
  private names = new Map<string, string>();
  private namePattern: RegExp | undefined;
  private abovePattern: RegExp | undefined;
  private lastCaps: RuntimeCaps | undefined;
  private readonly disk: DiskWatch;

  /** A warm prefix's process is replaced after this many uses (module instances of prefix runs are never freed). */
  maxUses: number | undefined;

  private constructor(
    readonly process: DenoProcess,
    readonly memoryMb: number,
  ) {
    const limitBytes = (process.options.diskMb ?? DEFAULT_DISK_MB) * 1048576;
    const over = (why: string) => {
      this.tainted = true;
      process.kill(why, "disk");
    };
    // Its private directory, and its own DENO_DIR, where Deno caches what the guest's modules
    // compile to (deno-dir.ts): worn past half the limit, it serves no further run.
    const cache = {
      dir: process.denoDir,
      worn: () => {
        this.tainted = true;
      },
    };
    this.disk = new DiskWatch(process.dir, limitBytes, over, () => process.pid, cache);
    process.onMessage = (message) => this.route(message);
    process.onExit = (reason, outOfMemory, cause) => this.lost(reason, outOfMemory, cause === "disk");
  }

  /** `spawned` sees the instance as soon as its process exists, before it is ready. */
  static async create(options: DenoProcessOptions, spawned?: (instance: DenoInstance) => void): Promise<DenoInstance> {
    const process = await DenoProcess.start(options);
    const instance = new DenoInstance(process, options.memoryMb);
    spawned?.(instance);
    await process.ready;
    // What Deno itself keeps at start (the seeded caches) is not the guest's doing.
    await instance.disk.takeBase();
    return instance;
  }

  get disposed(): boolean {
    return this.gone;
  }

  /** The execution that owns this process: the RSS watchdog reads the process while there is one. */
  get listener(): InstanceListener | undefined {
    return this.current;
  }

  set listener(listener: InstanceListener | undefined) {
    this.current = listener;
    // A refusal explains only the run it happened in (a warm process serves many).
    if (listener) this.process.options.importGrant?.clearRefusals();
    // Watched while idle too: what a guest left running (a worker thread, a node:timers loop)
    // must not grow or spin between runs, where no run's limits apply.
    watchRss(this, !this.gone);
    this.idleSince = listener === undefined ? { cpu: this.process.cpuTimeNs() } : undefined;
  }

  /**
   * Why the import proxy turned away a fetch of the module Deno could not load: Deno itself says
   * only "unsuccessful tunnel" or the status. The latest refusal of a host the message names.
   */
  private importRefusal(message: string): string {
    const refusals = this.process.options.importGrant?.refusals ?? [];
    for (let i = refusals.length - 1; i >= 0; i--) {
      const { host, reason } = refusals[i];
      if (host !== "" && message.includes(host)) return ` (cordon's import proxy refused it: ${reason})`;
    }
    return "";
  }

  get importHosts(): readonly string[] {
    return this.process.options.importHosts;
  }

  cpuTimeNs(): bigint {
    return this.process.cpuTimeNs();
  }

  async evaluate(request: EvaluateRequest, startCpu: () => void): Promise<void> {
    const { bindings, mode, inputText, caps, source, sourceImports } = request;
    if (this.gone) throw new CordonError("ERR_INSTANCE_RESET", "the Deno process ended before the run started");
    if (bindings) this.bindings = bindings;
    this.lastCaps = caps;
    const message = {
      t: "evaluate",
      work: ++this.work,
      bindingsText: bindings ? bindings.text : null,
      mode,
      inputText,
      caps,
      reset: this.resetEachRun,
    };
    if (source.script && Object.keys(sourceImports).length === 0) {
      // No imports, no top-level await: one eval, no file (the guest's frames carry its filename).
      this.lineMaps.set(source.filename, source.script.lineMap);
      startCpu();
      this.process.send({ ...message, script: source.script.code, filename: source.filename });
      return;
    }
    const graph = await writeGraph(this.process.dir, source, sourceImports, this.bindings?.text, request.compile);
    for (const [name, map] of graph.lineMaps) this.lineMaps.set(name, map);
    for (const [path, name] of graph.names) this.names.set(path, name);
    this.namePattern = undefined;
    if (this.gone) throw new CordonError("ERR_INSTANCE_RESET", "the Deno process ended before the run started");
    startCpu();
    this.process.send({ ...message, url: graph.url });
  }

  async call(path: string, argsTexts: string[], caps: RuntimeCaps): Promise<string> {
    const same = sameCaps(this.lastCaps, caps);
    this.lastCaps = caps;
    const message = { t: "call", work: ++this.work, path, joined: joinTexts(argsTexts), caps: same ? undefined : caps };
    const value = await this.request(message, true);
    if (typeof value !== "string") return "";
    // Only thrown outcomes are renamed: a value comes back exactly as the guest made it.
    return value.includes(this.process.dir) || value.includes(", <anonymous>:")
      ? renameThrownOutcomes(value, (thrown) => this.guestNames(thrown))
      : value;
  }

  /** Resolves once the answer is out of this process (the run's AnswerGate waits for that). */
  settle(callId: number, ok: boolean, text: string): Promise<unknown> {
    // As a text frame: inside JSON a 2 MB answer was escaped here and parsed again in the process.
    return new Promise((resolve) => this.process.send({ t: "settle", callId, ok, text }, () => resolve(undefined), true));
  }

  async fire(timerId: number): Promise<unknown> {
    this.process.send({ t: "fire", timerId });
    return undefined;
  }

  async ping(): Promise<unknown> {
    return this.request({ t: "ping" });
  }

  /**
   * What an idle warm process costs, for the residency budget: its resident size, not its V8
   * heap (a Deno process holds ~40 MB beyond its heap). The round trip keeps it behind the guest.
   */
  async measureHeap(): Promise<number> {
    try {
      await this.request({ t: "heap" });
      this.heapUsedBytes = this.process.rss() ?? this.heapUsedBytes;
    } catch {}
    return this.heapUsedBytes;
  }

  dispose(): void {
    if (this.gone) return;
    this.gone = true;
    this.listener = undefined;
    watchRss(this, false);
    this.process.kill("disposed");
  }

  /** Called by the watchdog every RSS_POLL_MS while the process lives: memory always, CPU while idle. */
  checkRss(): void {
    const usage = this.process.usage();
    if (usage === undefined || this.gone) {
      if (this.gone) watchRss(this, false);
      return;
    }
    const rss = usage.rssBytes;
    const idle = this.idleSince;
    if (idle && usage.cpuNs - idle.cpu > IDLE_CPU_NS) {
      this.tainted = true;
      this.process.kill("it kept using CPU after its run ended (a worker or timer the guest left running)");
      return;
    }
    const budget = this.process.baseRss + (this.memoryMb + RSS_SLACK_MB) * 1024 * 1024;
    if (rss > budget) {
      this.tainted = true;
      this.process.kill(`over its memory limit (resident ${Math.round(rss / 1048576)} MB)`, "memory");
      return;
    }
    this.disk.poll({ writtenBytes: this.process.writtenBytes(), cpuNs: usage.cpuNs }, performance.now());
  }

  /** `call`: the reply is a call's outcomes (see route). */
  private request(message: Record<string, unknown>, call = false): Promise<unknown> {
    if (this.gone) return Promise.reject(new CordonError("ERR_INSTANCE_RESET", "the Deno process has ended"));
    const seq = ++this.seq;
    return new Promise((resolve, reject) => {
      this.replies.set(seq, { resolve, reject, call });
      this.process.send({ ...message, seq });
    });
  }

  /** Module paths in the private directory read as the guest's own names (`<guest>`, `./lib/a.ts`, `db`). */
  guestNames(text: string): string {
    // Deno prints a frame of eval'd code as "(name, <anonymous>:line:column)": read it as V8 does.
    text = withoutEvalMarkers(text);
    const dir = this.process.dir;
    // The host's directory of Deno processes, two levels up: a path above the private directory
    // (an import of "../x.js", refused) named it; it reads as the guest wrote it, relative.
    const root = posix.dirname(posix.dirname(dir));
    const above = posix.basename(root).startsWith(HOST_DIR_PREFIX);
    if (!text.includes(above ? root : dir)) return text;
    this.namePattern ??= new RegExp(
      `(?:file://)?${dir.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/([^\\s:)"'?\\\\]+)(?:\\?r=\\d+)?`,
      "g",
    );
    const named = text.replace(this.namePattern, (_whole, rel: string) => {
      const path = `${dir}/${rel}`;
      return this.names.get(path) ?? (rel.startsWith(".cordon/") ? "<cordon>" : `./${rel}`);
    });
    if (!above) return named;
    this.abovePattern ??= new RegExp(`(?:file://)?${root.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(/[^\\s:)"'?\\\\]*)?`, "g");
    return named.replace(
      this.abovePattern,
      (_whole, rest: string | undefined) => posix.relative(dir, root + (rest ?? "")) || ".",
    );
  }

  private route(message: Record<string, unknown>): void {
    // What the guest sends names the run or call it was sent in. One of earlier work, read once
    // the next was under way (a run that failed, then produced its outcome anyway), is dropped:
    // laid on the next run, it completed that run with the earlier one's value, or made its host
    // call. Replies are matched by their own sequence number.
    const problem = frameProblem(message);
    if (problem !== undefined) {
      this.process.kill(`protocol error: ${problem}`);
      return;
    }
    if (message.work !== undefined && message.work !== this.work) return;
    const listener = this.listener;
    switch (message.t) {
      case "reply": {
        const pending = this.replies.get(message.seq as number);
        this.replies.delete(message.seq as number);
        // The outcomes are read through promises, after the frames already here: a failure
        // reported in a later frame must find them arrived (Execution.taskFailed).
        if (pending?.call && typeof message.value === "string") listener?.onReturned?.(message.value);
        pending?.resolve(message.value);
        return;
      }
      case "log":
        listener?.onLog(message.level as string, this.guestNames(String(message.message)), message.index as number | undefined);
        return;
      case "call":
        listener?.onCall(message.callId as number, message.fnId as number, message.argsText as string);
        return;
      case "timer":
        listener?.onTimer(message.timerId as number, message.ms as number);
        return;
      case "done":
        listener?.onDone(
          message.kind as string,
          message.kind === "t" ? this.guestNames(String(message.text)) : String(message.text),
          message.index as number | undefined,
        );
        return;
      case "dirty":
        // A global the guest made could not be removed: this process serves no later run.
        this.tainted = true;
        return;
      case "threw": {
        if (message.code === "ERR_MODULE_NOT_FOUND") {
          const text = this.guestNames(String(message.message));
          listener?.onFailure?.(new CordonError("ERR_MODULE_NOT_FOUND", `${text}${this.importRefusal(text)}`));
          return;
        }
        let error: unknown;
        try {
          error = sharedCodec().decode(this.guestNames(String(message.text)));
        } catch {
          error = new Error("the guest failed with an error that could not be read");
        }
        listener?.onFailure?.(error);
        return;
      }
    }
  }

  private lost(reason: string, outOfMemory: boolean, overDisk: boolean): void {
    const wasGone = this.gone;
    this.gone = true;
    watchRss(this, false);
    for (const pending of this.replies.values()) pending.reject(new CordonError("ERR_INSTANCE_RESET", reason));
    this.replies.clear();
    const listener = this.listener;
    if (wasGone && reason === "disposed") return;
    this.tainted = true;
    this.disk.stopped = true;
    // The design has no code of its own for disk: a storage limit fired, so a memory limit's.
    listener?.onFailure?.(
      outOfMemory
        ? new CordonError("ERR_MEMORY_LIMIT", `the run exceeded its memory limit of ${this.memoryMb} MB (${reason})`)
        : overDisk
          ? new CordonError(
              "ERR_MEMORY_LIMIT",
              `the run exceeded its disk limit of ${this.disk.limitBytes / 1048576} MB (${reason})`,
            )
          : new CordonError("ERR_INSTANCE_RESET", `the Deno process ended: ${reason}`),
    );
  }
}

const EVAL_MARKER = ", <anonymous>:";

/**
 * "name, <anonymous>:1:2" -> "name:1:2", in one pass. Not a regular expression: the text is the
 * guest's (an error message, a stack), and /([^\s(),]+), <anonymous>:/ backtracks over every
 * long run of name characters: a 200,000-character message held the host's thread for 82 s.
 */
export function withoutEvalMarkers(text: string): string {
  let at = text.indexOf(EVAL_MARKER);
  if (at < 0) return text;
  let out = "";
  let from = 0;
  while (at >= 0) {
    let start = at;
    while (start > from && !/[\s(),]/.test(text[start - 1])) start--;
    let end = at + EVAL_MARKER.length;
    const lineEnd = digitsEnd(text, end);
    const columnEnd = lineEnd > end && text[lineEnd] === ":" ? digitsEnd(text, lineEnd + 1) : lineEnd;
    if (start < at && lineEnd > end && columnEnd > lineEnd + 1) {
      // name, then ":line:column" (the marker's ", <anonymous>" dropped)
      out += text.slice(from, at) + text.slice(at + EVAL_MARKER.length - 1, columnEnd);
      end = columnEnd;
    } else {
      out += text.slice(from, end);
    }
    from = end;
    at = text.indexOf(EVAL_MARKER, from);
  }
  return out + text.slice(from);
}

/** Where the run of ASCII digits starting at `from` in `text` ends. */
function digitsEnd(text: string, from: number): number {
  let at = from;
  while (at < text.length && text.charCodeAt(at) >= 48 && text.charCodeAt(at) <= 57) at++;
  return at;
}
