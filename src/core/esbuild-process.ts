import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { Socket } from "node:net";
import { Worker } from "node:worker_threads";
import {
  type EsbuildFailure,
  type EsbuildOperation,
  esbuildClientMain,
  type FromEsbuildClient,
  type ToEsbuildClient,
} from "./esbuild-client.js";
import { execPathRunsScripts } from "./exec-path.js";

/**
 * The heap esbuild's client may use: outputs are decoded there, then copied to the host.
 * Measured: 15.3 MB of real code (TypeScript's compiler, both its module and script forms, near
 * the 16 MiB a run takes) failed at 64 MB and fit in 80. 512 MB holds several such compiles at
 * once, or one output near the nesting scan's 256 M-character cap (nesting.ts). Past it V8
 * aborts the client's process, and only its calls fail. Past V8's longest string (2^29-24
 * characters) esbuild's client throws, with the same outcome.
 */
export const ESBUILD_HEAP_MB = 512;
/** A client told to stop that has not ended this long after is ended by force. */
const STOP_GRACE_MS = 5_000;
/** The end of the client's stderr kept while it runs, to find V8's fatal error in. */
const STDERR_KEPT = 2_048;
/** V8's last words: "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory". */
const V8_FATAL = /FATAL ERROR: [^\n]*/;

/**
 * Finds V8's fatal line in a dying process's stderr. The line is kept once whole: the native
 * stack trace V8 prints after it can be longer than the end that is kept (it was once, and the
 * failure no longer said "heap").
 */
export class FatalLine {
  private tail = "";
  private found?: string;

  feed(text: string): void {
    const joined = this.tail + text;
    if (this.found === undefined) {
      const match = V8_FATAL.exec(joined);
      if (match && joined.includes("\n", match.index)) this.found = match[0];
    }
    this.tail = joined.slice(-STDERR_KEPT);
  }

  /** The fatal line, once the stream ended (one cut short by the exit counts too). */
  get line(): string | undefined {
    return this.found ?? V8_FATAL.exec(this.tail)?.[0];
  }
}

/** How a client failed, as far as it or its exit told. */
type ClientFailure = { code?: string; name?: string; message: string };

/** The client that held a call ended before answering it. */
export class EsbuildClientLost extends Error {
  constructor(
    message: string,
    /** It ended decoding an output too large for it (past V8's longest string, or its heap). */
    readonly tooLarge: boolean,
    /** The calls the client held when it ended (1: this one was the cause). */
    readonly held: number,
  ) {
    super(message);
  }
}

const esbuildPath = createRequire(import.meta.url).resolve("esbuild");

/** What the host does with one client, whichever way it runs. */
interface Link {
  send(message: ToEsbuildClient): void;
  /** Whether the client keeps the host alive (only while it holds calls). */
  hold(on: boolean): void;
  /** Ends the client by force, with esbuild's processes it started (`pids`: those it reported). */
  kill(pids: Iterable<number>): void;
}

interface LinkEvents {
  message(message: FromEsbuildClient): void;
  /** The client ended; `failure` says how, when more is known than an exit status. */
  exit(status: string, failure?: ClientFailure): void;
}

/**
 * esbuild's client in a child process of its own, in a process group of its own (`detached`)
 * that esbuild's service processes join: whatever the client does (throw where no caller can
 * catch, abort out of heap) ends at most that group. It starts with none of the host's
 * environment. When the host goes (even by SIGKILL), the IPC channel closes and the client kills
 * its group.
 */
function processLink(events: LinkEvents, heapMb: number): Link {
  const source = `
const port = {
  esbuildPath: ${JSON.stringify(esbuildPath)},
  // Once the channel closed a send would emit 'error' (uncaught, then reported, then again): the
  // 'disconnect' below is ending the group anyway.
  post: (message, then) => process.connected && process.send(message, then === undefined ? undefined : () => then()),
  listen: (handler) => process.on("message", handler),
};
process.on("disconnect", () => {
  try { process.kill(-process.pid, "SIGKILL"); } catch {}
  process.exit(0);
});
(${esbuildClientMain.toString()})(require, port);
`;
  // ESBUILD_BINARY_PATH is how an install names esbuild's binary elsewhere; nothing else is passed.
  const env: NodeJS.ProcessEnv = {};
  if (process.env.ESBUILD_BINARY_PATH) env.ESBUILD_BINARY_PATH = process.env.ESBUILD_BINARY_PATH;
  const child = spawn(process.execPath, [`--max-old-space-size=${heapMb}`, "-e", source], {
    stdio: ["ignore", "ignore", "pipe", "ipc"],
    serialization: "advanced",
    detached: true,
    env,
  });
  const stderr = new FatalLine();
  const pipe = child.stderr as Socket;
  pipe.setEncoding("utf8");
  pipe.on("data", (text: string) => stderr.feed(text));
  pipe.unref();
  child.unref();
  let ended = false;
  const group = () => {
    // The group outlives its leader while esbuild's processes live, so its id is not reused
    // before they are gone; ESRCH when none is left.
    try {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    } catch {}
  };
  child.on("message", (message: FromEsbuildClient) => events.message(message));
  child.on("error", (error: Error & { code?: string }) => {
    // A send on a channel that just closed: the 'exit' that follows says how the client ended.
    if (ended || child.pid !== undefined) return;
    ended = true;
    events.exit("not started", { code: error.code, name: error.name, message: error.message });
  });
  child.on("exit", (code, signal) => {
    if (ended) return;
    ended = true;
    group();
    // Its stderr's last data may arrive after 'exit': read what there is once the pipe ends.
    const report = () => {
      const fatal = stderr.line;
      const failure = fatal ? { code: /heap|memory/i.test(fatal) ? "ERR_OUT_OF_MEMORY" : undefined, message: fatal } : undefined;
      events.exit(signal ? `signal ${signal}` : `code ${code}`, failure);
    };
    if (pipe.readableEnded || pipe.destroyed) report();
    else pipe.once("close", report);
  });
  return {
    send: (message) => child.send(message),
    // The child and its stderr too: a client that dies holding calls closes its channel first,
    // and the 'exit' and stderr that fail those calls must still reach the host (a host with
    // nothing else to wait for ended with the calls never settled).
    hold: (on) => {
      const channel = child.channel as { ref(): void; unref(): void } | null | undefined;
      for (const handle of [channel, child, pipe]) {
        if (on) handle?.ref();
        else handle?.unref();
      }
    },
    kill: group,
  };
}

/**
 * The same client on a worker thread, where no `node -e` can be started (single executable
 * applications, Electron). Weaker: a thread's heap limit is best effort (Node #47224: at 16 MB a
 * compile aborted the whole process), and the host must kill the esbuild processes it reported.
 */
function threadLink(events: LinkEvents, heapMb: number): Link {
  const port = `(() => {
    const { parentPort } = require("node:worker_threads");
    return {
      esbuildPath: ${JSON.stringify(esbuildPath)},
      post: (message, then) => { parentPort.postMessage(message); if (then) then(); },
      listen: (handler) => parentPort.on("message", handler),
    };
  })()`;
  // Evaluated as CommonJS (it needs `require`), with none of the host's node flags (some, like
  // --no-node-snapshot, are refused in workers).
  const worker = new Worker(`(${esbuildClientMain.toString()})(require, ${port})`, {
    eval: true,
    execArgv: [],
    resourceLimits: { maxOldGenerationSizeMb: heapMb },
  });
  let failure: ClientFailure | undefined;
  worker.on("message", (message: FromEsbuildClient) => events.message(message));
  worker.on("error", (error: Error & { code?: string }) => {
    failure ??= { code: error.code, name: error.name, message: error.message };
  });
  worker.on("exit", (code) => events.exit(`code ${code}`, failure));
  worker.unref();
  return {
    send: (message) => worker.postMessage(message),
    hold: (on) => (on ? worker.ref() : worker.unref()),
    kill: (pids) => {
      void worker.terminate();
      for (const pid of pids) endOrphan(pid);
    },
  };
}

/** Clients run on threads in this process (see `esbuildOnThreads`). */
let onThreads = false;

/**
 * For a process that is itself the boundary (a process host's worker): its clients run on worker
 * threads. A client's abort then ends this process, which its supervisor replaces, and no worker
 * pays for a Node process of its own (44 MB resident, measured) to compile a source import.
 */
export function esbuildOnThreads(): void {
  onThreads = true;
}

/** One esbuild client (a process; a thread where none can be started): services, each with its process. */
export class EsbuildProcess {
  private stopped = false;
  private services = 0;
  private readonly link: Link;
  private readonly calls = new Map<number, { service: number; resolve(value: unknown): void; reject(error: Error): void }>();
  private seq = 0;
  private lostWith?: EsbuildClientLost;
  /** The failure the client reported before it ended, if it did. */
  private failure?: ClientFailure;
  /** esbuild's service processes the client started and has not reaped. */
  private readonly pids = new Set<number>();
  private graceTimer?: NodeJS.Timeout;

  /** `heapMb`: the client's heap (tests make it small to see the client run out). */
  constructor(heapMb = ESBUILD_HEAP_MB) {
    const events: LinkEvents = {
      message: (message) => this.route(message),
      exit: (status, failure) => this.ended(status, failure),
    };
    this.link = !onThreads && execPathRunsScripts() ? processLink(events, heapMb) : threadLink(events, heapMb);
  }

  /** True once the client has ended: its calls failed, and it takes no more. */
  get lost(): boolean {
    return this.lostWith !== undefined;
  }

  /** A name for a new service on this client (it starts on its first call). */
  newService(): number {
    return ++this.services;
  }

  call(service: number, operation: EsbuildOperation): Promise<unknown> {
    if (this.lostWith) return Promise.reject(this.lostWith);
    const id = ++this.seq;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { service, resolve, reject });
      if (this.calls.size === 1) this.link.hold(true);
      this.link.send({ t: "call", id, service, operation });
    });
  }

  /** Stops one service and its process: the calls it still holds are abandoned, never answered. */
  stopService(service: number): void {
    if (this.stopped || this.lostWith) return;
    this.link.send({ t: "stopService", service });
    // Their callers have gone; kept, they would hold the client (and the host) alive for ever.
    for (const [id, waiting] of this.calls) {
      if (waiting.service !== service) continue;
      this.calls.delete(id);
      waiting.reject(new Error("esbuild's service was stopped"));
    }
    if (this.calls.size === 0) this.link.hold(false);
  }

  /** Ends the client and its services' processes (waiting for them, so they are reaped). */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.lostWith) return;
    this.link.send({ t: "stop" });
    this.endAfterGrace();
  }

  /** A client still busy (decoding a huge output, say) after the grace is ended by force. */
  private endAfterGrace(): void {
    if (this.graceTimer) return;
    this.graceTimer = setTimeout(() => this.link.kill(this.pids), STOP_GRACE_MS);
    this.graceTimer.unref();
  }

  private route(message: FromEsbuildClient): void {
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
    if (this.calls.size === 0) this.link.hold(false);
    if (message.failure) waiting.reject(esbuildError(message.failure));
    else waiting.resolve(message.value);
  }

  private ended(status: string, exitFailure?: ClientFailure): void {
    clearTimeout(this.graceTimer);
    const failure = this.failure ?? exitFailure;
    const reason = failure
      ? `esbuild's client failed (${failure.code ?? failure.name ?? "Error"}: ${failure.message})`
      : `esbuild's client exited (${status})`;
    this.lostWith = new EsbuildClientLost(reason, failure !== undefined && tooLarge(failure), this.calls.size);
    this.stopped = true;
    // A thread ended by force leaves its service processes running (a process's died with its group).
    if (this.pids.size > 0) this.link.kill(this.pids);
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
    // Gone (the client stopped it and waited for it), or no /proc: nothing more to do.
  }
}

/** A failure of decoding an output too large: V8's longest string, the client's heap, a buffer. */
function tooLarge(failure: { code?: string; message: string }): boolean {
  return (
    failure.code === "ERR_STRING_TOO_LONG" ||
    failure.code === "ERR_WORKER_OUT_OF_MEMORY" ||
    failure.code === "ERR_OUT_OF_MEMORY" ||
    /Invalid string length|allocation failed|Invalid typed array length|Array buffer|heap limit/i.test(failure.message)
  );
}

/** esbuild's error again, with the `errors` and `warnings` cordon reads (firstErrorText). */
function esbuildError(failure: EsbuildFailure): Error {
  const error = new Error(failure.message) as Error & EsbuildFailure;
  if (failure.errors !== undefined) error.errors = failure.errors;
  if (failure.warnings !== undefined) error.warnings = failure.warnings;
  return error;
}
