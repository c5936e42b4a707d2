import type { ChildProcess } from "node:child_process";
import type { Socket } from "node:net";

/** How each of a child's first descriptors is given: a pipe to this process, nothing, or ours. */
export type StdioKind = "pipe" | "ignore" | "inherit";

/**
 * A child process as its owner sees it, however it was started: by this process (`DirectChild`)
 * or by the spawner process on its behalf (spawner.ts), whose pid and pipes arrive a moment after
 * the request to start it.
 */
export interface SpawnedChild {
  /** Hands `started` the child's pid and its pipes by descriptor number (undefined where not piped), once it runs. */
  onStarted(started: (pid: number, pipes: readonly (Socket | undefined)[]) => void): void;
  /** The child exited (killed by `signal`, or with `code`). */
  onExit(listener: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  /** It could not be started, or the spawner that started it is gone. */
  onError(listener: (error: Error) => void): void;
  /** SIGKILL: the only way cordon ends a child that must go now. */
  kill(): void;
  /** Whether this child keeps this process's event loop alive (work in flight, starting, ending). */
  hold(held: boolean): void;
}

/** A child this process spawned itself (node:child_process): its pid and pipes exist at once. */
export class DirectChild implements SpawnedChild {
  constructor(private readonly child: ChildProcess) {}

  onStarted(started: (pid: number, pipes: readonly (Socket | undefined)[]) => void): void {
    // No pid: the spawn failed, and "error" follows.
    if (this.child.pid === undefined) return;
    started(
      this.child.pid,
      this.child.stdio.map((pipe) => (pipe ?? undefined) as Socket | undefined),
    );
  }

  onExit(listener: (code: number | null, signal: NodeJS.Signals | null) => void): void {
    this.child.on("exit", listener);
  }

  onError(listener: (error: Error) => void): void {
    this.child.on("error", listener);
  }

  kill(): void {
    try {
      this.child.kill("SIGKILL");
    } catch {}
  }

  hold(held: boolean): void {
    // Its pipes are sockets (ref and unref), though typed as streams.
    const handles = [this.child, ...this.child.stdio] as ({ ref(): void; unref(): void } | null)[];
    for (const handle of handles) {
      if (!handle) continue;
      if (held) handle.ref();
      else handle.unref();
    }
  }
}
