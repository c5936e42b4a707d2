import type { EngineStats } from "./engine.js";
import type { ResolvedLimits } from "./limits.js";
import type { GuestSource } from "./source.js";

/**
 * The host protocol: the messages between a sandbox and the process that runs its engines.
 * Every host speaks it — the process host frames it over a pipe (src/core/framing.ts); a remote
 * host will carry it over HTTP. Values inside (inputs, results, bridge arguments) travel as codec
 * text, never as live objects.
 *
 * Rules (MUST): every request carries an id unique within the connection; every run, prepare,
 * prefix run and call gets exactly one answer with its id; a bridge call from the worker is
 * answered exactly once with its cid; an unknown message type, a malformed frame or an answer
 * to an unknown id is a protocol error and the peer is retired.
 */

/** Sandbox → worker. */
export type HostRequest =
  | {
      t: "run";
      id: number;
      source: GuestSource;
      sourceImports: Record<string, string>;
      bindingsText: string;
      inputText: string;
      limits: ResolvedLimits;
      mode?: "run" | "prepare";
      abortable?: boolean;
    }
  | {
      t: "prepare";
      id: number;
      key: string;
      source: GuestSource;
      sourceImports: Record<string, string>;
      bindingsText: string;
      limits: ResolvedLimits;
    }
  | {
      t: "prefix-run";
      id: number;
      prefix: number;
      source: GuestSource;
      inputText: string;
      limits: ResolvedLimits;
      abortable?: boolean;
    }
  /** `abortable`: the caller holds a signal, so an abort may follow (calls without one can be coalesced). */
  | { t: "prefix-call"; id: number; prefix: number; path: string; argsText: string; limits: ResolvedLimits; abortable?: boolean }
  | { t: "prefix-dispose"; prefix: number }
  | { t: "abort"; id: number; reason: string }
  | { t: "bridge-result"; cid: number; ok: boolean; text: string }
  | { t: "stats"; id: number };

/** Worker → sandbox. */
export type HostEvent =
  | { t: "ready"; pid: number; rssBytes: number }
  /** The answer to run / prefix-run / prefix-call: the RunResult as codec text, and the engine's stats after it. */
  | { t: "result"; id: number; resultText: string; stats: EngineStats }
  /** The answer to prepare: the prefix's handle in this worker (when it evaluated) and its RunResult. */
  | { t: "prepared"; id: number; prefix?: number; resultText: string; stats: EngineStats }
  /** A guest called a host binding of run (or prefix) `id`. */
  | { t: "bridge-call"; id: number; cid: number; fnId: number; argsText: string }
  | { t: "stats"; id: number; stats: EngineStats };
