import type { Socket } from "node:net";
import { spawnChild } from "./spawner.js";

/** How much of a command's stderr is kept for its error message. */
const STDERR_CHARS = 2000;
/** How long after its exit a command's stderr is read. */
const STDERR_GRACE_MS = 200;
/** stdin and stdout /dev/null, stderr a pipe to this process. */
const STDIO: ("ignore" | "pipe")[] = ["ignore", "ignore", "pipe"];

export interface CommandOutcome {
  /** Its exit code; null when a signal (or the timeout) ended it. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The start of what it wrote to stderr. */
  stderr: string;
}

/**
 * Run a short command to its end (mkfifo, a Deno checkpoint): through the spawner process when it
 * runs (core/spawner.ts), so this process is not forked for it (a fork blocks its event loop for
 * 7–39 ms here, more the larger the process). It runs in `/` unless told (give it absolute paths);
 * its stdin and stdout are /dev/null. Past `timeoutMs` it is killed. Rejects when it cannot be
 * started (the error's `code` is ENOENT for a command that is not there).
 */
export function runCommand(
  command: string,
  args: string[],
  options: { env: Record<string, string>; cwd?: string; timeoutMs: number },
): Promise<CommandOutcome> {
  return new Promise((resolve, reject) => {
    const child = spawnChild(command, args, {
      // Not this process's directory by default: one that was removed would fail the spawn with
      // ENOENT, taken for a missing command.
      cwd: options.cwd ?? "/",
      env: options.env,
      stdio: STDIO,
      coverInherited: true,
    });
    let stderr = "";
    let stderrDone: Promise<void> = Promise.resolve();
    let pipe: Socket | undefined;
    child.onStarted((_pid, pipes) => {
      const stream = pipes[2];
      if (!stream) return;
      pipe = stream;
      stream.setEncoding("utf8");
      stderrDone = new Promise((done) => {
        stream.on("data", (text: string) => {
          if (stderr.length < STDERR_CHARS) stderr += text.slice(0, STDERR_CHARS - stderr.length);
        });
        stream.on("end", done);
        stream.on("close", done);
        stream.on("error", done);
      });
    });
    const timer = setTimeout(() => child.kill(), options.timeoutMs);
    child.onExit((code, signal) => {
      clearTimeout(timer);
      // Its stderr may still be arriving: what it said before exiting is the error's detail. Not
      // for ever: a process it started may hold the pipe open (a shell killed mid-`sleep`).
      const grace = new Promise<void>((done) => setTimeout(done, STDERR_GRACE_MS));
      void Promise.race([stderrDone, grace]).then(() => {
        pipe?.destroy();
        resolve({ code, signal, stderr });
      });
    });
    child.onError((error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}
