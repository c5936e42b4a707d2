import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import {
  type EsbuildFailure,
  type EsbuildOperation,
  esbuildWorkerMain,
  type FromEsbuildWorker,
  type ToEsbuildWorker,
} from "./esbuild-worker.js";

/**
 * The heap the thread may use: esbuild's output is decoded there, then copied to the host.
 * Measured: 15.3 MB of real code (TypeScript's compiler, both its module and script forms, near
 * the 16 MiB a run takes) failed at 64 MB and fit in 80. 512 MB holds several such compiles at
 * once, or one output near the nesting scan's 256 M-character cap (nesting.ts). Past it the thread
 * dies and its calls fail, usually: Node's limit is best effort, and reached in some of V8's
 * paths it aborts the whole process (Node #47224; decision 014 has the measurements). Past V8's
 * longest string (2^29-24 characters) esbuild's client throws, and only the thread ends.
 */
export const ESBUILD_HEAP_MB = 512;
/** A thread told to stop that has not ended this long after is terminated. */
const STOP_GRACE_MS = 5_000;

/** The thread that held a call ended before answering it. */
export class EsbuildThreadLost extends Error {
  constructor(
    message: string,
    /** It ended decoding an output too large for it (past V8's longest string, or its heap). */
    readonly tooLarge: boolean,
    /** The calls the thread held when it ended (1: this one was the cause). */
    readonly held: number,
  ) {
    super(message);
  }
}

const esbuildPath = createRequire(import.meta.url).resolve("esbuild");

/** One worker thread running esbuild's client: one or more services, each with its process. */
export class EsbuildThread {
  private stopped = false;
  private services = 0;
  private readonly worker: Worker;
  private readonly calls = new Map<number, { service: number; resolve(value: unknown): void; reject(error: Error): void }>();
  private seq = 0;
  private lostWith?: EsbuildThreadLost;
  /** The failure the thread reported before it ended, if it did. */
  private failure?: { code?: string; name?: string; message: string };
  /** esbuild's service processes the thread started and has not reaped. */
  private readonly pids = new Set<number>();

  constructor() {
    // Evaluated as CommonJS (it needs `require`), with none of the host's node flags (some, like
    // --no-node-snapshot, are refused in workers).
    this.worker = new Worker(`(${esbuildWorkerMain.toString()})(require)`, {
      eval: true,
      workerData: { esbuildPath },
      execArgv: [],
      resourceLimits: { maxOldGenerationSizeMb: ESBUILD_HEAP_MB },
    });
    this.worker.on("message", (message: FromEsbuildWorker) => this.route(message));
    this.worker.on("error", (error: Error & { code?: string }) => {
      this.failure ??= { code: error.code, name: error.name, message: error.message };
    });
    this.worker.on("exit", (code) => this.ended(code));
    // An idle thread must not keep the host alive; one with calls in flight does (see call()).
    this.worker.unref();
  }

  /** True once the thread has ended: its calls failed, and it takes no more. */
  get lost(): boolean {
    return this.lostWith !== undefined;
  }

  /** A name for a new service on this thread (it starts on its first call). */
  newService(): number {
    return ++this.services;
  }

  call(service: number, operation: EsbuildOperation): Promise<unknown> {
    if (this.lostWith) return Promise.reject(this.lostWith);
    const id = ++this.seq;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { service, resolve, reject });
      if (this.calls.size === 1) this.worker.ref();
      this.worker.postMessage({ t: "call", id, service, operation } satisfies ToEsbuildWorker);
    });
  }

  /** Stops one service and its process: the calls it still holds are abandoned, never answered. */
  stopService(service: number): void {
    if (this.stopped || this.lostWith) return;
    this.worker.postMessage({ t: "stopService", service } satisfies ToEsbuildWorker);
    // Their callers have gone; kept, they would hold the thread (and the host) alive for ever.
    for (const [id, waiting] of this.calls) {
      if (waiting.service !== service) continue;
      this.calls.delete(id);
      waiting.reject(new Error("esbuild's service was stopped"));
    }
    if (this.calls.size === 0) this.worker.unref();
  }

  /** Ends the thread and its services' processes (waiting for them, so they are reaped). */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.lostWith) return;
    this.worker.postMessage({ t: "stop" } satisfies ToEsbuildWorker);
    this.endAfterGrace();
  }

  /** A thread still busy (decoding a huge output, say) after the grace is ended by force. */
  private endAfterGrace(): void {
    const timer = setTimeout(() => void this.worker.terminate(), STOP_GRACE_MS);
    timer.unref();
    this.worker.once("exit", () => clearTimeout(timer));
  }

  private route(message: FromEsbuildWorker): void {
    if (message.t === "service") {
      this.pids.add(message.pid);
      return;
    }
    if (message.t === "reaped") {
      this.pids.delete(message.pid);
      return;
    }
    if (message.t === "ended") {
      this.pids.clear();
      return;
    }
    if (message.t === "failed") {
      this.failure = { code: message.code, name: message.name, message: message.message };
      this.endAfterGrace();
      return;
    }
    const waiting = this.calls.get(message.id);
    if (!waiting) return;
    this.calls.delete(message.id);
    if (this.calls.size === 0) this.worker.unref();
    if (message.failure) waiting.reject(esbuildError(message.failure));
    else waiting.resolve(message.value);
  }

  private ended(exitCode: number): void {
    const failure = this.failure;
    const reason = failure
      ? `esbuild's client failed (${failure.code ?? failure.name ?? "Error"}: ${failure.message})`
      : `esbuild's thread exited (code ${exitCode})`;
    this.lostWith = new EsbuildThreadLost(reason, failure !== undefined && tooLarge(failure), this.calls.size);
    this.stopped = true;
    for (const pid of this.pids) endOrphan(pid);
    for (const waiting of this.calls.values()) waiting.reject(this.lostWith);
    this.calls.clear();
  }
}

/**
 * A thread ended by force (out of memory, terminated) leaves its service process running: esbuild
 * finishes the transform in hand although its stdin closed (measured: 97% CPU after the thread
 * was terminated, decision 014). Killed here, if it is still esbuild and still this process's
 * child (it is never reaped, so its pid is not reused until the host exits).
 */
function endOrphan(pid: number): void {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (stat.includes("(esbuild)") && ppid === process.pid) process.kill(pid, "SIGKILL");
  } catch {
    // Gone (the thread stopped it and waited for it), or no /proc: nothing more to do.
  }
}

/** A failure of decoding an output too large: V8's longest string, the thread's heap, a buffer. */
function tooLarge(failure: { code?: string; message: string }): boolean {
  return (
    failure.code === "ERR_STRING_TOO_LONG" ||
    failure.code === "ERR_WORKER_OUT_OF_MEMORY" ||
    /Invalid string length|allocation failed|Invalid typed array length|Array buffer/i.test(failure.message)
  );
}

/** esbuild's error again, with the `errors` and `warnings` cordon reads (firstErrorText). */
function esbuildError(failure: EsbuildFailure): Error {
  const error = new Error(failure.message) as Error & EsbuildFailure;
  if (failure.errors !== undefined) error.errors = failure.errors;
  if (failure.warnings !== undefined) error.warnings = failure.warnings;
  return error;
}
