import type { ResolvedLimits } from "../core/limits.js";
import { msSince } from "../core/milliseconds.js";
import type { LogEntry, LogLevel } from "../core/types.js";

const LOG_LEVELS = new Set<LogLevel>(["log", "info", "warn", "error", "debug"]);

/**
 * The logs of an execution's calls (one list per call coalesced into it; a run is call 0), each
 * within the run's log limits: past maxLogEntries or maxLogBytes a call's lines are dropped, and
 * its result says which limit cut them.
 */
export class CallLogs {
  private readonly lists: LogEntry[][] = [];
  private readonly bytes: number[] = [];
  /** Which log limit cut each call's logs first, if one did. */
  private readonly cut: ("entries" | "bytes" | undefined)[] = [];
  private lastAtMs = 0;

  constructor(
    private readonly size: number,
    private readonly limits: Pick<ResolvedLimits, "maxLogEntries" | "maxLogBytes">,
    /** When the execution began (performance.now()): entries are timed from it. */
    private readonly started: number,
  ) {
    for (let i = 0; i < size; i++) {
      this.lists.push([]);
      this.bytes.push(0);
      this.cut.push(undefined);
    }
  }

  /** Call `index`'s logs (the list its result carries). */
  of(index: number): LogEntry[] {
    return this.lists[index];
  }

  /**
   * A line the guest logged for call `index` (anything else: call 0), `atMs` into the run
   * (default: now).
   */
  add(level: string, message: string, index: number, atMs?: number): void {
    const at = Number.isInteger(index) && index >= 0 && index < this.size ? index : 0;
    const { maxLogEntries, maxLogBytes } = this.limits;
    if (this.lists[at].length >= maxLogEntries || this.bytes[at] >= maxLogBytes) {
      this.cut[at] ??= this.lists[at].length >= maxLogEntries ? "entries" : "bytes";
      return;
    }
    // A line longer than what is left is cut there, not dropped whole: its start is usually
    // what explains it.
    const room = maxLogBytes - this.bytes[at];
    const kept = message.length > room ? cutAt(message, room) : message;
    if (kept !== message) this.cut[at] ??= "bytes";
    this.bytes[at] += kept.length;
    const safeLevel = LOG_LEVELS.has(level as LogLevel) ? (level as LogLevel) : "log";
    // Never before an earlier line: a line from v8's outbox carries the guest's whole milliseconds.
    this.lastAtMs = Math.max(this.lastAtMs, atMs ?? msSince(this.started));
    this.lists[at].push({ level: safeLevel, message: kept, atMs: this.lastAtMs });
  }

  /** When a limit cut call `index`'s logs: a last line in `logs` saying which. Returns whether one did. */
  noteCut(index: number, logs: LogEntry[]): boolean {
    const cut = this.cut[index];
    if (!cut) return false;
    const { maxLogEntries, maxLogBytes } = this.limits;
    // The limit that cut them, by the name a caller raises it with.
    const over =
      cut === "entries" ? `${maxLogEntries} entries (limits.maxLogEntries)` : `${maxLogBytes} bytes (limits.maxLogBytes)`;
    logs.push({
      level: "warn",
      message: `[cordon] logs truncated: the run logged more than ${over}`,
      atMs: msSince(this.started),
    });
    return true;
  }
}

/** `text` cut to `length` UTF-16 units, never between the two halves of a surrogate pair. */
function cutAt(text: string, length: number): string {
  const code = text.charCodeAt(length - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? length - 1 : length);
}
