import { closeSync, readdirSync, readFileSync } from "node:fs";

/** O_CLOEXEC as /proc/<pid>/fdinfo prints a descriptor's flags (octal). */
const O_CLOEXEC = 0o2000000;

/**
 * Close every descriptor this process inherited beyond stdin, stdout and stderr. A descriptor the host process itself inherited without close-on-exec (from whatever
 * started it) passes through Node's spawn into every worker, and a guest that escaped its engine
 * could use it. What Node and libuv open is close-on-exec, and what survived exec into this
 * process is not: that flag tells the two apart. Linux only (elsewhere there is no /proc: none closed).
 */
export function closeInheritedDescriptors(): void {
  let names: string[];
  try {
    names = readdirSync("/proc/self/fd");
  } catch {
    return;
  }
  for (const name of names) {
    const fd = Number(name);
    if (!Number.isInteger(fd) || fd <= 2) continue;
    try {
      const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"));
      if (flags && (Number.parseInt(flags[1], 8) & O_CLOEXEC) === 0) closeSync(fd);
    } catch {
      // Gone already (the directory listing's own descriptor): nothing to close.
    }
  }
}
