import type { RunMode } from "../../core/engine.js";
import type { RuntimeCaps } from "../instance.js";
import type { QuickJSTemplate } from "./worker-instances.js";

/**
 * Messages between the host and a QuickJS worker thread. Every message names the instance
 * (`id`); a request that expects an answer carries `seq`, echoed in its `reply`.
 */
/**
 * The shared memory of an instance (`control` in "create"): bytes 0–3 (Int32) the stop flag (the
 * interrupt handler reads it), bytes 4–7 (Int32) a version of what follows (odd while the worker
 * writes it), bytes 8–15 (Float64) the CPU time counted over finished crossings (ms), bytes 16–23
 * (Float64) when the current crossing entered (ms of process.hrtime, 0 between crossings). worker-instances.ts hard-codes the size
 * (it is evaluated from its source and cannot import this).
 */
export const CONTROL_BYTES = 24;

export type ToWorker =
  /** The warm-up modules, for a thread started before the host had them (worker.ts, QuickJSWorkerData). */
  | { t: "warm-up"; id: 0; modules: string }
  /** `warmUp`: a spare made ahead runs the warm-up modules once (engines/warm-up-modules.ts). */
  | { t: "create"; id: number; seq: number; memoryMb: number; control: SharedArrayBuffer; warmUp: boolean }
  | {
      t: "evaluate";
      id: number;
      bindingsText: string | null;
      mode: RunMode;
      inputText: string;
      caps: RuntimeCaps;
      /** A module without imports or top-level await, as a script that returns its exports. */
      script?: { code: string; filename: string };
      /**
       * Otherwise the module graph: every importable module's source (normalized source imports
       * and host modules), the not-found message with "%s" where the specifier goes, and the
       * source imports esbuild refused, with its message: refused only if something imports them.
       */
      module?: {
        code: string;
        filename: string;
        imports: Record<string, string>;
        notFound: string;
        uncompiled: Record<string, string>;
      };
    }
  | { t: "call"; id: number; seq: number; path: string; joined: string; caps?: RuntimeCaps }
  /** With `seq` (a long answer), the worker replies once the guest has it: the run's AnswerGate waits for that. */
  | { t: "settle"; id: number; callId: number; ok: boolean; text: string; seq?: number }
  | { t: "fire"; id: number; timerId: number }
  | { t: "ping"; id: number; seq: number }
  | { t: "heap"; id: number; seq: number }
  | { t: "dispose"; id: number }
  /** A run for this thread is coming: nothing to do, only to be awake for it (Engine.expectRun). */
  | { t: "wake"; id: 0 };
// Any message may carry `quiet: true`: the host has paused polling (core/busy-poll.ts), and the
// worker does not turn for the next request either.

export type FromWorker =
  | { t: "reply"; id: number; seq: number; value?: unknown; error?: string }
  /** The template this thread made, sent before its first reply (worker-instances.ts). */
  | { t: "template"; id: 0; template: QuickJSTemplate }
  | { t: "log"; id: number; level: string; message: string; index?: number }
  | { t: "call"; id: number; callId: number; fnId: number; argsText: string }
  /** A crossing's timer changes, as pairs: timer id, delay in ms (negative: cancelled). */
  | { t: "timers"; id: number; list: number[] }
  | { t: "done"; id: number; kind: string; text: string; index?: number }
  /** Guest code threw past the runtime: an uncaught exception, an interrupt, out of memory. */
  | {
      t: "threw";
      id: number;
      error: { name: string; message: string; stack?: string };
      interrupted?: boolean;
      fatal?: boolean;
      /** The error is the module loader's refusal of a specifier (ERR_MODULE_NOT_FOUND). */
      notFound?: boolean;
      /** The error is QuickJS's refusal to parse the script form (ERR_COMPILE). */
      unparsed?: boolean;
    }
  /** The instance's WASM module failed; the instance is gone. */
  | { t: "lost"; id: number };
