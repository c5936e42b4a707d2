import type { StdioNull, StdioPipe } from "node:child_process";
import { closeSync, openSync, readdirSync, readFileSync } from "node:fs";

/** O_CLOEXEC as /proc/<pid>/fdinfo prints a descriptor's flags (octal). */
const O_CLOEXEC = 0o2000000;

/**
 * The descriptors this process inherited beyond stdin, stdout and stderr. A descriptor the host
 * process itself inherited without close-on-exec (from a supervisor, a shell's `3>file`) passes
 * through Node's spawn into every child, and a guest that escaped its engine could use it. What
 * Node and libuv open is close-on-exec, and what survived exec into this process is not: that
 * flag tells the two apart. Linux only (elsewhere there is no /proc: none listed).
 */
export function inheritedDescriptors(): number[] {
  let names: string[];
  try {
    names = readdirSync("/proc/self/fd");
  } catch {
    return [];
  }
  const inherited: number[] = [];
  for (const name of names) {
    const fd = Number(name);
    if (!Number.isInteger(fd) || fd <= 2) continue;
    try {
      const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"));
      if (flags && (Number.parseInt(flags[1], 8) & O_CLOEXEC) === 0) inherited.push(fd);
    } catch {
      // Gone already (the directory listing's own descriptor).
    }
  }
  return inherited;
}

/** Close every inherited descriptor: a process worker does, before it loads an engine. */
export function closeInheritedDescriptors(): void {
  for (const fd of inheritedDescriptors()) {
    try {
      closeSync(fd);
    } catch {}
  }
}

let devNull: number | undefined;
/**
 * Listed once (reading /proc takes ~0.5 ms with 20 descriptors open): nothing this process opens
 * later is inherited, so the list can only shrink, and a number covered after its descriptor
 * was closed only gives the child /dev/null there.
 */
let inheritedAtStart: number[] | undefined;

/**
 * `stdio` for a child that cannot close what it inherits itself (a Deno process): every
 * inherited descriptor's number gets /dev/null instead. A descriptor `spawn` is given replaces
 * the inherited one in the child; "ignore" would leave it there. The /dev/null descriptor,
 * opened once, is close-on-exec like everything Node opens, so it reaches no child under its
 * own number.
 */
export function withoutInherited(stdio: (StdioPipe | StdioNull)[]): (StdioPipe | StdioNull | number)[] {
  inheritedAtStart ??= inheritedDescriptors();
  const inherited = inheritedAtStart;
  if (inherited.length === 0) return stdio;
  devNull ??= openSync("/dev/null", "r+");
  const covered: (StdioPipe | StdioNull | number)[] = [...stdio];
  for (let fd = covered.length; fd <= Math.max(...inherited); fd++) covered.push("ignore");
  for (const fd of inherited) covered[fd] = devNull;
  return covered;
}
