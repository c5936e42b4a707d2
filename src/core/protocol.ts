import type { EngineStats, RunMode } from "./engine.js";
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

/** The bodies of the requests that run guest code, shared by every host; `H` is a prefix's handle. */
interface RunBody {
  source: GuestSource;
  sourceImports: Record<string, string>;
  bindingsText: string;
  inputText: string;
  limits: ResolvedLimits;
  mode?: RunMode;
  /** The caller holds a signal, so an abort may follow (calls without one can be coalesced). */
  abortable?: boolean;
}
interface PrepareBody {
  key: string;
  source: GuestSource;
  sourceImports: Record<string, string>;
  bindingsText: string;
  limits: ResolvedLimits;
}
interface PrefixRunBody<H> {
  prefix: H;
  source: GuestSource;
  inputText: string;
  limits: ResolvedLimits;
  abortable?: boolean;
}
interface PrefixCallBody<H> {
  prefix: H;
  path: string;
  argsText: string;
  limits: ResolvedLimits;
  abortable?: boolean;
}

/**
 * Over a pipe: the sandbox's loop turns until this answer is read (core/busy-poll.ts), so the
 * worker's loop may turn after answering it, for the next request. Only then: with the sandbox's
 * thread asleep, a worker turning takes the core that thread wakes up on.
 */
interface PollHint {
  poll?: boolean;
}

/** Sandbox → worker. */
export type HostRequest =
  | ({ t: "run"; id: number } & RunBody & PollHint)
  | ({ t: "prepare"; id: number } & PrepareBody)
  | ({ t: "prefix-run"; id: number } & PrefixRunBody<number> & PollHint)
  /**
   * Limits omitted: the same as the previous call to this prefix (a call's header was two thirds
   * limits, stringified by the host and parsed by the worker every time).
   */
  | ({ t: "prefix-call"; id: number } & Omit<PrefixCallBody<number>, "limits"> & { limits?: ResolvedLimits } & PollHint)
  /**
   * Calls to one prefix's export made in the same tick, without limits, signal or poll hint:
   * `ids[i]`'s arguments are the i-th of argsText's parts split at U+0001 (codec text never holds
   * one raw). hosts/process/call-batch.ts.
   */
  | { t: "prefix-calls"; ids: number[]; prefix: number; path: string; argsText: string }
  | { t: "prefix-dispose"; prefix: number }
  | { t: "abort"; id: number; reason: string }
  | { t: "bridge-result"; cid: number; ok: boolean; text: string; tooLarge?: boolean }
  | { t: "stats"; id: number };

/** Worker → sandbox. */
export type HostEvent =
  | { t: "ready"; pid: number; rssBytes: number }
  /**
   * The answer to run / prefix-run / prefix-call: the RunResult as codec text, and the engine's
   * stats after it when the answer leaves the worker idle or the last stats are 100 ms old.
   */
  | { t: "result"; id: number; resultText: string; stats?: EngineStats }
  /**
   * The same answer when it completed with a value and nothing else (no logs, exports or skipped
   * exports): the value as codec text, the run's stats as [wallMs, cpuMs, heapUsedBytes or -1,
   * bridgeCalls, warm ? 1 : 0]. A whole RunResult took the worker 1.2 µs to encode and the host
   * 1.6 µs to read; this form 0.5 and 0.6 µs.
   */
  | { t: "value"; id: number; valueText: string; run: number[]; stats?: EngineStats }
  /**
   * Several "value" answers written in the same tick (a crossing's coalesced calls): `ids[i]`'s
   * value is the i-th of valueText's parts split at U+0001 (codec text never holds one raw), its
   * stats `runs[5i .. 5i+4]`. Never with stats. A frame an answer cost the worker's thread 14% of
   * its time and the host's 9% (v8 events one per call, 64 in flight).
   */
  | { t: "values"; ids: number[]; runs: number[]; valueText: string }
  /** The answer to prepare: the prefix's handle in this worker (when it evaluated) and its RunResult. */
  | { t: "prepared"; id: number; prefix?: number; resultText: string; stats: EngineStats }
  /** A guest called a host binding of run (or prefix) `id`. */
  | { t: "bridge-call"; id: number; cid: number; fnId: number; argsText: string; maxBytes?: number }
  /** The run or call that made bridge call `cid` has ended: the host stops what it still does. */
  | { t: "bridge-cancel"; cid: number }
  | { t: "stats"; id: number; stats: EngineStats }
  /**
   * A guest this worker disposed for a fired limit runs on (a builtin no limit interrupts): its
   * thread and memory stay taken until it returns. The host gives the worker no new work.
   */
  | { t: "unsound"; reason: string };

/**
 * Where an executor calls back for a request's host bindings (the remote host): POST
 * `{ run, name, argsText }` to `url` with `authorization: Bearer <grant>`. `names[fnId]` is the
 * binding name of function `fnId` in the bindings descriptor; the host dispatches by name, and
 * only the names its grant lists.
 */
export interface RemoteCallback {
  url: string;
  run: string;
  grant: string;
  names: string[];
}

/**
 * A callback's answer, by the request's choice: an executor that sends this header with `text`
 * reads the body as the answer's kind (`ok`, `error` or `too-large`), a line feed, then its codec
 * text; without it, the body is JSON `{ ok, text, tooLarge }` (what executors before it read, and
 * what a host before it sends: a body starting with `{` is read so). The kind is in the body, not
 * a header, because an app mounting the handler may pass on the body alone. The text is codec
 * text already: wrapped in JSON it was escaped and parsed again, 18 of the ~45 ms of host CPU a
 * 2 MB answer took here.
 */
export const CALLBACK_ANSWER_HEADER = "x-cordon-answer";

/** A host call's answer (codec text of an Error) once the run or call that made it is over. */
export const RUN_OVER_TEXT = '{"$":"e","n":"Error","m":"the run is over"}';
export type CallbackAnswerKind = "ok" | "error" | "too-large";

/**
 * Client → executor (`POST /host`, admitted by the executor's bearer secret): the host protocol's
 * requests, one per HTTP request, with the engine to run them on. The answer to run, prefix-run
 * and prefix-call is the RunResult as codec text; to prepare, the same with the prefix's handle in
 * the `cordon-prefix` header when it evaluated. Bridge calls travel the other way, as callbacks.
 * Closing the HTTP request drops a request still waiting for a run slot, and aborts a started one
 * when it is `abortable`. One that also carries an `abortId` is aborted by an `abort` request
 * naming it (same client id) and still answered, with the lines its guest logged before it.
 */
export type RemoteRequest = { engine: "v8" | "quickjs"; callback?: RemoteCallback } & (
  | ({ t: "run" } & RunBody & AbortById)
  | ({ t: "prepare"; partitionKey?: string } & PrepareBody)
  | ({ t: "prefix-run" } & PrefixRunBody<string> & AbortById)
  | ({ t: "prefix-call" } & PrefixCallBody<string> & AbortById)
  | { t: "prefix-dispose"; prefix: string }
  | { t: "abort"; abortId: string; reason: string }
);

/** A remote run's id for an `abort` request: random, made by the client for that run (CLIENT_ID's form). */
interface AbortById {
  abortId?: string;
}

/**
 * The header that carries the executor engine's load with every answer, as numbers joined by
 * commas: warm instances, idle instances, idle heap bytes, budget bytes, spare instances.
 */
export const LOAD_HEADER = "cordon-load";
/**
 * The header a remote host sends with every request: a random id of its client instance (a new
 * one each time a process starts). Optional: the executor tells a client that restarted from one
 * that cycles through its prefixes by it (remote-prefixes.ts); without it, one client per address.
 */
export const CLIENT_HEADER = "cordon-client";
/** What the executor takes as a client id; anything else counts as none. */
export const CLIENT_ID = /^[\w-]{1,64}$/;

/** The longest reason an `abort` request may carry (the client cuts longer ones; the caller's answer keeps the whole). */
export const ABORT_REASON_CHARS = 4096;

/** The header that carries a prepared prefix's handle on the executor. */
export const PREFIX_HEADER = "cordon-prefix";
/** The code of a 404 for a prefix the executor no longer holds: the client prepares it again. */
export const PREFIX_GONE = "ERR_PREFIX_GONE";
