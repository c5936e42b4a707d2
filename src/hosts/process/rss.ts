import { readFileSync } from "node:fs";

export const PAGE_BYTES = 4096;

/** Resident set size of a process, from /proc/<pid>/statm (Linux). Undefined when unreadable. */
export function readRss(pid: number): number | undefined {
  try {
    return rssOf(readFileSync(`/proc/${pid}/statm`, "latin1"));
  } catch {
    return undefined;
  }
}

/** The resident size a /proc/<pid>/statm text gives, in bytes. */
export function rssOf(statm: string | undefined): number | undefined {
  const pages = Number(statm?.split(" ")[1]);
  return Number.isFinite(pages) ? pages * PAGE_BYTES : undefined;
}

/**
 * On Linux the process host refuses to start without /proc: a memory watchdog that enforces
 * nothing is worse than a start-up failure. Elsewhere there is no /proc to read, and the README
 * says the watchdog does not apply.
 */
export function watchdogAvailable(): boolean {
  if (process.platform !== "linux") return false;
  return readRss(process.pid) !== undefined;
}
