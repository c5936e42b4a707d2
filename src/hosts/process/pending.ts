import type { BindingsLike } from "../../core/bindings.js";
import type { RunResult } from "../../core/types.js";
import { ReleasingMemory } from "./rss-budget.js";

/** A worker that sent nothing for this long while a request is overdue is taken as hung. */
const SILENT_MS = 2_000;
const EXTENSION_STEP_MS = 1_000;
const MAX_EXTENSION_MS = 30_000;

/** A request without its id (the worker process numbers requests itself), per union member. */
export type WithoutId<T> = T extends unknown ? Omit<T, "id"> : never;

/** A request sent to a worker process and not yet answered. */
export interface Pending {
  resolve(result: RunResult): void;
  bindings?: BindingsLike;
  /** A prefix's run or call: the id of the prepare whose bindings it may call. */
  owner?: number;
  /** Host calls the request may still make (its maxBridgeCalls): the worker's own count, checked again here. */
  hostCalls?: number;
  /** Its maxBridgeCallBytes as the host resolved it: the cap of its answers on their way (BridgeCalls). */
  maxAnswerChars?: number;
  memoryMb: number;
  /** A one-off run: its memory stays counted for a while after its answer (ReleasingMemory). */
  oneOff?: boolean;
  /** A prepare: what the worker keeps of the prefix once it holds it (rss-budget.ts heldBytesOf). */
  keptBytes?: number;
  /** The answer to a prepare carries the prefix handle too. */
  onPrepared?(prefix: number | undefined, result: RunResult): void;
  timer?: NodeJS.Timeout;
}

/** What the backstop asks of the worker: is the request still unanswered, since when is it silent, end it. */
export interface BackstopWorker {
  unanswered(): boolean;
  silentForMs(): number;
  end(cause: string): void;
}

/**
 * The host's last word on a request the worker's own limits should have ended: past the run's
 * wall time (+1 s) the worker is ended — unless it is still talking (it answers the pool's stats
 * polls every second). A worker starved of CPU by guests that spin in it answers late, not never;
 * ending it would fail every other run inside it. A worker silent for 2 s, or still not done
 * 30 s past the deadline, is ended (and only this request fails with ERR_WALL_TIMEOUT).
 */
export function armBackstop(pending: Pending, ms: number, cause: string, worker: BackstopWorker, extendedMs = 0): void {
  pending.timer = setTimeout(() => {
    if (!worker.unanswered()) return;
    const talking = worker.silentForMs() < SILENT_MS;
    if (talking && extendedMs < MAX_EXTENSION_MS) {
      armBackstop(pending, EXTENSION_STEP_MS, cause, worker, extendedMs + EXTENSION_STEP_MS);
      return;
    }
    const why = talking
      ? ` (+1 s, and ${MAX_EXTENSION_MS / 1000} s more while it still answered)`
      : " (+1 s), and it stopped answering";
    worker.end(`${cause}${why}`);
  }, ms);
}

/** A worker's requests in flight, by id, and what the host reads off them. */
export class InFlight extends Map<number, Pending> {
  /** One-off runs answered a moment ago, whose instances may not be disposed yet. */
  readonly releasing = new ReleasingMemory();

  /** Memory the runs in flight may use, and the one-off runs just answered used, in bytes. */
  get memoryBytes(): number {
    let total = this.releasing.bytes();
    for (const p of this.values()) total += p.memoryMb * 1024 * 1024;
    return total;
  }

  /** Prepares not yet answered. */
  get preparing(): number {
    let preparing = 0;
    for (const pending of this.values()) if (pending.onPrepared) preparing++;
    return preparing;
  }

  /**
   * A run or call in flight of the prefix prepared by request `owner`, one with host calls left
   * when there is one (the worker does not say which call a host call is for).
   */
  callerOf(owner: number): Pending | undefined {
    let found: Pending | undefined;
    for (const pending of this.values()) {
      if (pending.owner !== owner) continue;
      if (pending.hostCalls === undefined || pending.hostCalls > 0) return pending;
      found ??= pending;
    }
    return found;
  }
}
