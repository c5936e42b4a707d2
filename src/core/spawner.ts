import { type ChildProcess, spawn } from "node:child_process";
import type { Socket } from "node:net";
import { fileURLToPath } from "node:url";
import { withoutInherited } from "./inherited-fds.js";
import { DirectChild, type SpawnedChild, type StdioKind } from "./spawned-child.js";

/**
 * Child processes (the process host's workers, the deno engine's processes) started off the
 * host's event loop. Node's spawn forks the calling process (libuv on Linux), and a fork copies
 * the caller's page tables while its loop waits: 7–23 ms from a host of 66 MB resident, 18–39 ms
 * from one of 484 MB (measured), for every child started, replaced or recycled, while every
 * other run and call waits. A small helper process (spawner-main.ts) does the spawning instead:
 * the host sends it a request over an IPC channel and gets the child's pipes back as handles, so
 * they are the host's as before and nothing the child writes passes through the helper. The
 * helper forks only itself (a few MB of page tables). It is shared by every user in this
 * process, started with the first, and ends when the last is done and its children have exited.
 *
 * Until the helper has said it is ready (and if it cannot run), children are spawned directly,
 * as before: a pool's first workers are, while the helper starts beside them.
 */

/** The helper's entry runs from dist/, as the process host's worker does. */
const SPAWNER_MAIN = fileURLToPath(new URL("../../dist/core/spawner-main.js", import.meta.url));

/** After this many unexpected exits of the helper, this process spawns directly from then on. */
const MAX_HELPER_FAILURES = 3;

export type ToSpawner =
  | {
      t: "spawn";
      id: number;
      command: string;
      args: string[];
      cwd: string;
      env: Record<string, string>;
      stdio: StdioKind[];
      detached: boolean;
    }
  | { t: "kill"; id: number };

export type FromSpawner =
  | { t: "ready" }
  /** Sent with the child's pipe at descriptor `fd` as the handle, one for each piped descriptor. */
  | { t: "pipe"; id: number; fd: number }
  /** After its pipes. */
  | { t: "started"; id: number; pid: number }
  /** `code`: the spawn's errno name (ENOENT for a command that is not there), when it has one. */
  | { t: "error"; id: number; message: string; code?: string }
  | { t: "exit"; id: number; code: number | null; signal: NodeJS.Signals | null };

export interface SpawnOptions {
  cwd: string;
  env: Record<string, string>;
  stdio: StdioKind[];
  /** A process group of its own. */
  detached?: boolean;
  /**
   * It cannot close the descriptors it inherits itself (a Deno process, a short command): spawned
   * here, not by the helper (which closed its own), this process's inherited ones get /dev/null
   * (core/inherited-fds.ts's withoutInherited).
   */
  coverInherited?: boolean;
}

/** A child the helper started for this process: its pid, pipes and exit arrive over the channel. */
class RemoteChild implements SpawnedChild {
  pid = 0;
  private readonly pipes: (Socket | undefined)[] = [];
  private readonly startedListeners: ((pid: number, pipes: readonly (Socket | undefined)[]) => void)[] = [];
  private readonly exitListeners: ((code: number | null, signal: NodeJS.Signals | null) => void)[] = [];
  private readonly errorListeners: ((error: Error) => void)[] = [];
  held = true;
  ended = false;

  constructor(
    private readonly helper: Helper,
    readonly id: number,
  ) {}

  onStarted(started: (pid: number, pipes: readonly (Socket | undefined)[]) => void): void {
    if (this.pid) started(this.pid, this.pipes);
    else this.startedListeners.push(started);
  }

  onExit(listener: (code: number | null, signal: NodeJS.Signals | null) => void): void {
    this.exitListeners.push(listener);
  }

  onError(listener: (error: Error) => void): void {
    this.errorListeners.push(listener);
  }

  kill(): void {
    if (!this.ended) this.helper.send({ t: "kill", id: this.id });
  }

  hold(held: boolean): void {
    this.held = held;
    this.holdPipes();
    this.helper.holdChanged();
  }

  private holdPipes(): void {
    for (const pipe of this.pipes) {
      if (!pipe) continue;
      if (this.held) pipe.ref();
      else pipe.unref();
    }
  }

  // ---- from the helper ------------------------------------------------------------------------

  gotPipe(fd: number, pipe: Socket): void {
    this.pipes[fd] = pipe;
  }

  started(pid: number): void {
    this.pid = pid;
    this.holdPipes();
    for (const listener of this.startedListeners.splice(0)) listener(pid, this.pipes);
  }

  exited(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.ended) return;
    this.ended = true;
    for (const listener of this.exitListeners) listener(code, signal);
  }

  failed(error: Error): void {
    if (this.ended) return;
    this.ended = true;
    for (const listener of this.errorListeners) listener(error);
  }
}

/** The helper process and the children it started for this process. */
class Helper {
  ready = false;
  /** Settles with the helper's pid once it is ready, or undefined if it goes first. */
  readonly started: Promise<number | undefined>;
  private settleStarted: (pid: number | undefined) => void = () => {};
  private readonly children = new Map<number, RemoteChild>();
  private nextId = 0;
  private readonly process: ChildProcess;

  constructor(private readonly onGone: (helper: Helper, unexpected: boolean) => void) {
    this.started = new Promise((resolve) => {
      this.settleStarted = resolve;
    });
    // No environment (each child's is sent with its request), nothing on stdin or stdout; its
    // stderr, and so its children's where they inherit it, is the host's, as when spawned here.
    this.process = spawn(process.execPath, ["--no-node-snapshot", SPAWNER_MAIN], {
      env: {},
      stdio: ["ignore", "ignore", "inherit", "ipc"],
    });
    this.process.on("message", (message: FromSpawner, handle: unknown) => this.receive(message, handle as Socket));
    this.process.on("error", () => this.gone(true));
    this.process.on("exit", () => this.gone(!this.ending));
    this.holdChanged();
  }

  private ending = false;
  private over = false;

  spawn(command: string, args: string[], options: SpawnOptions): RemoteChild {
    const child = new RemoteChild(this, ++this.nextId);
    this.children.set(child.id, child);
    const { cwd, env, stdio, detached = false } = options;
    this.send({ t: "spawn", id: child.id, command, args, cwd, env, stdio, detached });
    this.holdChanged();
    return child;
  }

  send(message: ToSpawner): void {
    if (this.process.connected) this.process.send(message);
  }

  get idle(): boolean {
    return this.children.size === 0;
  }

  /**
   * Keep the event loop alive while a child it started is held, and only then: not while the
   * helper itself starts (one that never became ready would keep a finished host from exiting).
   */
  holdChanged(): void {
    let held = false;
    for (const child of this.children.values()) held ||= child.held;
    const channel = this.process.channel as { ref(): void; unref(): void } | undefined | null;
    if (held) {
      this.process.ref();
      channel?.ref();
    } else {
      this.process.unref();
      channel?.unref();
    }
  }

  /** End the helper (its children have exited): it exits when its channel closes. */
  end(): void {
    this.ending = true;
    if (this.process.connected) this.process.disconnect();
  }

  private receive(message: FromSpawner, handle: Socket | undefined): void {
    if (message.t === "ready") {
      this.ready = true;
      this.settleStarted(this.process.pid);
      this.holdChanged();
      return;
    }
    const child = this.children.get(message.id);
    if (!child) {
      handle?.destroy();
      return;
    }
    switch (message.t) {
      case "pipe":
        if (handle) child.gotPipe(message.fd, handle);
        return;
      case "started":
        child.started(message.pid);
        return;
      case "error":
        this.children.delete(child.id);
        child.failed(Object.assign(new Error(message.message), message.code ? { code: message.code } : {}));
        break;
      case "exit":
        this.children.delete(child.id);
        child.exited(message.code, message.signal);
        break;
    }
    this.holdChanged();
  }

  /**
   * The helper is gone: its children's exits would never be reported. Each is killed here and
   * reported killed. Its pid is its own unless its exit was on its way when the helper died and
   * the pid was reused in that instant; a child the helper started whose pid had not arrived
   * ends by itself (a worker reads end of file on stdin, a Deno process gets its parent-death signal).
   */
  private gone(unexpected: boolean): void {
    if (this.over) return;
    this.over = true;
    this.ready = false;
    this.settleStarted(undefined);
    for (const child of this.children.values()) {
      if (child.pid) {
        try {
          process.kill(child.pid, "SIGKILL");
        } catch {}
        child.exited(null, "SIGKILL");
      } else child.failed(new Error("the spawner process exited before the child started"));
    }
    this.children.clear();
    this.onGone(this, unexpected);
  }
}

let helper: Helper | undefined;
let users = 0;
let failures = 0;

/**
 * A pool or engine starts using the helper (starting it if none runs). Call the function returned
 * when done (disposed); calls after the first do nothing, so a second dispose releases no one else's use.
 */
export function useSpawner(): () => void {
  users++;
  startHelper();
  let released = false;
  return () => {
    if (released) return;
    released = true;
    users--;
    endIfUnused();
  };
}

function startHelper(): void {
  if (helper || users === 0 || failures >= MAX_HELPER_FAILURES || process.platform !== "linux") return;
  try {
    helper = new Helper((gone, unexpected) => {
      if (helper !== gone) return;
      helper = undefined;
      // Killed or crashed: a new one for the pools still here (spawning directly until it is ready).
      if (unexpected) {
        failures++;
        startHelper();
      }
    });
  } catch {
    failures++;
  }
}

/** Test hook: the running helper's pid once it is ready (undefined when there is none). */
export function spawnerReady(): Promise<number | undefined> {
  return helper ? helper.started : Promise.resolve(undefined);
}

/** The last user gone, the helper ends once its children have exited. */
function endIfUnused(): void {
  if (users > 0 || !helper || !helper.idle) return;
  helper.end();
  helper = undefined;
}

/**
 * Start `command`: through the helper when it is ready, else here (a fork of this process, as
 * node:child_process does). Call `useSpawner` first (and its release when done) to have one.
 */
export function spawnChild(command: string, args: string[], options: SpawnOptions): SpawnedChild {
  if (helper?.ready) {
    const child = helper.spawn(command, args, options);
    // The last user may have been disposed while this child lived: the helper goes after it.
    child.onExit(() => setImmediate(endIfUnused));
    child.onError(() => setImmediate(endIfUnused));
    return child;
  }
  const { cwd, env, stdio, detached = false, coverInherited = false } = options;
  return new DirectChild(spawn(command, args, { cwd, env, detached, stdio: coverInherited ? withoutInherited(stdio) : stdio }));
}
