import type { ChildProcess } from "node:child_process";
import type { Readable, Writable } from "node:stream";

/**
 * A worker process as its WorkerProcess sees it, however it was started: by this process
 * (`DirectChild`) or by the spawner process on its behalf (spawner.ts), whose pipes arrive a
 * moment after the request to start it.
 */
export interface WorkerChild {
  /** Hands `ready` the worker's stdin and stdout once there are any (at once when started here). */
  onPipes(ready: (stdin: Writable, stdout: Readable) => void): void;
  /** The worker exited (killed by `signal`, or with `code`). */
  onExit(listener: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  /** It could not be started, or the spawner that started it is gone. */
  onError(listener: (error: Error) => void): void;
  /** SIGKILL: the only way cordon ends a worker that must go now. */
  kill(): void;
  /** Whether this worker keeps the host's event loop alive (work in flight, starting, ending). */
  hold(held: boolean): void;
}

/** A worker this process spawned itself (node:child_process): its pipes exist at once. */
export class DirectChild implements WorkerChild {
  constructor(private readonly child: ChildProcess) {}

  onPipes(ready: (stdin: Writable, stdout: Readable) => void): void {
    if (this.child.stdin && this.child.stdout) ready(this.child.stdin, this.child.stdout);
  }

  onExit(listener: (code: number | null, signal: NodeJS.Signals | null) => void): void {
    this.child.on("exit", listener);
  }

  onError(listener: (error: Error) => void): void {
    this.child.on("error", listener);
  }

  kill(): void {
    this.child.kill("SIGKILL");
  }

  hold(held: boolean): void {
    // Its pipes are sockets (ref and unref), though typed as streams.
    const handles = [this.child, this.child.stdin, this.child.stdout] as ({ ref(): void; unref(): void } | null)[];
    for (const handle of handles) {
      if (!handle) continue;
      if (held) handle.ref();
      else handle.unref();
    }
  }
}
