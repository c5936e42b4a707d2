/**
 * The spawner process (spawner.ts): starts child processes for the host, so the host's event
 * loop never waits for a fork of the host. It runs no guest code and holds no child's pipes: it
 * hands each piped descriptor to the host over the IPC channel (closing its own copy) and
 * reports the child's exit. When the host goes (its channel closes, or this process gets a new
 * parent), it kills every child it started and exits.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { closeInheritedDescriptors } from "./inherited-fds.js";
import type { FromSpawner, ToSpawner } from "./spawner.js";

// What the host inherited from its own parent is no business of its children: not passed on.
closeInheritedDescriptors();

const children = new Map<number, ChildProcess>();

// Ctrl-C and a terminal's hang-up reach the whole process group: the host drains its runs on
// them (cordon serve) and ends its children itself, as the process host's workers ignore them too.
for (const signal of ["SIGINT", "SIGHUP"] as const) process.on(signal, () => {});

function tell(message: FromSpawner, handle?: unknown): void {
  if (!process.connected) return;
  // biome-ignore lint/suspicious/noExplicitAny: process.send's handle parameter is typed loosely by Node.
  process.send?.(message, handle as any);
}

function start(request: Extract<ToSpawner, { t: "spawn" }>): void {
  let child: ChildProcess;
  try {
    child = spawn(request.command, request.args, {
      cwd: request.cwd,
      env: request.env,
      stdio: request.stdio,
      detached: request.detached,
    });
  } catch (error) {
    tell({ t: "error", id: request.id, message: String((error as Error)?.message ?? error), code: errnoCode(error) });
    return;
  }
  children.set(request.id, child);
  child.on("error", (error) => {
    if (children.delete(request.id)) tell({ t: "error", id: request.id, message: error.message, code: errnoCode(error) });
  });
  if (child.pid === undefined) return; // "error" follows
  // Sent, a handle is closed here (keepOpen is false): the pipes are the host's alone, so a
  // process host worker sees end of file on stdin when the host goes, as one spawned there does.
  request.stdio.forEach((kind, fd) => {
    const pipe = child.stdio[fd];
    if (kind !== "pipe" || !pipe) return;
    // Node starts reading a child's pipe as soon as it makes its socket, and a sent handle's reads
    // go nowhere until it is closed here: what a quick child wrote first (a command's error on
    // stderr) was lost to the host. Stopped, the bytes wait in the pipe for the host's reads.
    (pipe as { _handle?: { readStop?(): number } })._handle?.readStop?.();
    tell({ t: "pipe", id: request.id, fd }, pipe);
  });
  tell({ t: "started", id: request.id, pid: child.pid });
  child.on("exit", (code, signal) => {
    if (children.delete(request.id)) tell({ t: "exit", id: request.id, code, signal });
  });
}

process.on("message", (message: ToSpawner) => {
  if (message?.t === "spawn") start(message);
  else if (message?.t === "kill") children.get(message.id)?.kill("SIGKILL");
});

/** The host is gone (or done with it): so are the children, at once. */
function hostGone(): void {
  for (const child of children.values()) child.kill("SIGKILL");
  process.exit(0);
}
process.on("disconnect", hostGone);

// Node emits no 'disconnect' when the channel ends while a handle this process sent still waits
// for the host's acknowledgement (it puts the disconnect off until its handle queue drains, which
// a gone host never lets happen): a host that exited right after asking for a child left this
// process and the child running for good. So the channel's state and this process's parent
// (a new one once the host is gone) are also checked, a few times a second.
const host = process.ppid;
setInterval(() => {
  if (!process.connected || process.ppid !== host) hostGone();
}, 200).unref();

tell({ t: "ready" });

function errnoCode(error: unknown): string | undefined {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === "string" ? code : undefined;
}
