import type { EngineStats } from "../../core/engine.js";
import { readEngineStats } from "../../core/result-shape.js";
import { loopHeldMs } from "./loop-stalls.js";

/** Unread bytes on a worker's stdin past which it must keep reading at MIN_READ_PER_SECOND. */
export const MAX_STDIN_BACKLOG = 4 * 1024 * 1024;
/**
 * Its reading is judged over windows this long (checked on the host's writes, which include a
 * stats poll each second). Measured on a 2-core machine at load 4–11, a worker taking a burst of
 * 40–80 prepares of 0.5–1 MB read 6–23 MB/s (v8) and 0–33 MB/s (quickjs) over 1 s windows: a
 * quickjs worker's thread was held up to 2 s at a time (0 read), in these runs never 3 s; over
 * 3 s every worker read at least 4.6 MB/s. The pipe is fed 1 MB at a time (pipe-out.ts), so a window sees its
 * reading in 1 MB steps: a worker reading 1.4 MB/s or faster always passes.
 */
const READ_WINDOW_MS = 3000;
/** Slower than this, past the backlog, it holds the host's memory: retired (a healthy one reads ~5× this). */
const MIN_READ_PER_SECOND = 1024 * 1024;
/** Host calls for requests that are over: a few straggle legitimately; a stream of them is a flood. */
const STRAY_CALLS_BURST = 100;
const STRAY_CALLS_PER_SECOND = 20;
/** Prefixes a stats frame may list beyond the most the host has had prepared in that worker at once. */
const PREFIX_SLACK = 16;
/** Frames that carry no caller data ("ready", "bridge-cancel") are this small; stats add this much a prefix. */
const SMALL_FRAME_BYTES = 4096;
const STATS_BYTES_PER_PREFIX = 256;
/** The frames that carry results or host-call arguments, bounded only by the frame limit. */
const DATA_FRAMES = new Set(["result", "value", "values", "prepared", "bridge-call"]);

/**
 * What a worker can make the host do by writing to its pipe, bounded: a worker a guest has taken
 * over could otherwise grow the host's memory without end (host calls for unknown runs, each
 * answered into a stdin it never reads: +756 MB in 10 s) or stall the host's loop (9 MB stats
 * frames, as fast as the pipe takes them). Each method returns why the worker must be retired,
 * or undefined.
 */
export class FloodGuard {
  /** Past the backlog since `at`, when the worker had read `read` bytes and the loop been held `held` ms. */
  private window: { at: number; read: number; held: number } | undefined;
  private strayTokens = STRAY_CALLS_BURST;
  private strayAt = performance.now();
  private statsAsked = 0;
  /** The most prefixes the host has had prepared (or preparing) in this worker at once. */
  private mostPrefixes = 0;

  /**
   * After a write: a worker past MAX_STDIN_BACKLOG unread (`unread`; it has read `read` in all)
   * that reads slower than MIN_READ_PER_SECOND over a window is not reading. The window counts
   * only time the host's loop ran (loop-stalls.ts): while it is held, the host feeds no pipe.
   */
  backlog(unread: number, read: number): string | undefined {
    if (unread <= MAX_STDIN_BACKLOG) {
      this.window = undefined;
      return undefined;
    }
    const now = performance.now();
    const held = loopHeldMs();
    if (!this.window) {
      this.window = { at: now, read, held };
      return undefined;
    }
    const seconds = (now - this.window.at - (held - this.window.held)) / 1000;
    if (seconds * 1000 < READ_WINDOW_MS) return undefined;
    const rate = (read - this.window.read) / seconds;
    if (rate >= MIN_READ_PER_SECOND) {
      this.window = { at: now, read, held };
      return undefined;
    }
    const mb = (bytes: number) => `${Math.round(bytes / 1024 / 1024)} MB`;
    return `it left ${mb(unread)} of the host's messages unread, reading ${Math.round(rate / 1024)} KB/s (at least ${mb(MIN_READ_PER_SECOND)}/s while past ${mb(MAX_STDIN_BACKLOG)})`;
  }

  /** A host call for a request that is over (refused): allowed at a trickle. */
  strayCall(): string | undefined {
    const now = performance.now();
    this.strayTokens = Math.min(STRAY_CALLS_BURST, this.strayTokens + ((now - this.strayAt) / 1000) * STRAY_CALLS_PER_SECOND);
    this.strayAt = now;
    if (this.strayTokens < 1) return "protocol error: a stream of host calls for requests that are over";
    this.strayTokens--;
    return undefined;
  }

  /**
   * Any frame that carries no caller data must be small: a worker streaming padded 30 MB
   * "bridge-cancel" frames held the host's loop (1.7 s lags) and was never retired. Checked
   * after the frame is parsed, so each such worker costs one parse.
   */
  frameSize(type: unknown, bytes: number): string | undefined {
    if (typeof type === "string" && DATA_FRAMES.has(type)) return undefined;
    const max = SMALL_FRAME_BYTES + (type === "stats" ? (this.mostPrefixes + PREFIX_SLACK) * STATS_BYTES_PER_PREFIX : 0);
    return bytes > max ? `protocol error: a "${String(type).slice(0, 32)}" frame of ${bytes} bytes (at most ${max})` : undefined;
  }

  /** The host asked for stats: one stats frame may come back. */
  askedStats(): void {
    this.statsAsked++;
  }

  /** A stats frame on its own: only as an answer to the host's poll. */
  statsFrame(): string | undefined {
    if (this.statsAsked === 0) return "protocol error: stats it was not asked for";
    this.statsAsked--;
    return undefined;
  }

  /**
   * Stats, read as data and refused when they list more prefixes than the host has had in this
   * worker (`held` now, `preparing` in flight). A string says why the worker must be retired.
   */
  readStats(stats: unknown, held: number, preparing: number): EngineStats | string {
    this.mostPrefixes = Math.max(this.mostPrefixes, held + preparing);
    const read = readEngineStats(stats, this.mostPrefixes + PREFIX_SLACK);
    return read ?? "protocol error: malformed stats";
  }
}
