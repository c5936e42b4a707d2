import { signalAborted, signalReason } from "../core/abort-reason.js";
import type { PrefixCallRequest } from "../core/engine.js";
import type { RunResult } from "../core/types.js";
import { onAbort } from "../core/abort-listeners.js";

/** A call waiting for an instance of its prefix. */
export interface Queued {
  request: PrefixCallRequest;
  resolve(result: RunResult): void;
}

/**
 * A prefix's calls waiting for an instance, in order. A call whose signal aborts while it waits
 * leaves the queue at once with the aborted result; once taken to cross, its execution listens.
 */
export class CallQueue {
  private entries: Queued[] = [];
  /** Each entry's way to stop listening for its abort (entries without a signal have none). */
  private readonly leaving = new WeakMap<Queued, () => void>();

  constructor(private readonly aborted: (reason: string) => RunResult) {}

  get length(): number {
    return this.entries.length;
  }

  get first(): Queued | undefined {
    return this.entries[0];
  }

  /** Wait in the queue: resolves with the call's result once it is served (or aborted meanwhile). */
  add(request: PrefixCallRequest): Promise<RunResult> {
    const { signal } = request;
    if (signalAborted(signal)) return Promise.resolve(this.aborted(signalReason(signal as AbortSignal)));
    return new Promise<RunResult>((resolve) => {
      const queued: Queued = { request, resolve };
      if (signal) {
        const leave = onAbort(signal, () => {
          const index = this.entries.indexOf(queued);
          if (index < 0) return;
          this.entries.splice(index, 1);
          resolve(this.aborted(signalReason(signal)));
        });
        this.leaving.set(queued, leave);
        queued.resolve = (result) => {
          leave();
          resolve(result);
        };
      }
      this.entries.push(queued);
    });
  }

  /**
   * Take the first call and every later one `twin` accepts (asked in order, with the first),
   * leaving the rest in order. The calls taken stop listening for aborts: they cross now.
   */
  take(twin: (queued: Queued, first: Queued) => boolean): Queued[] {
    const first = this.entries[0];
    if (!first) return [];
    const batch: Queued[] = [first];
    const rest: Queued[] = [];
    for (let i = 1; i < this.entries.length; i++) {
      const queued = this.entries[i];
      if (twin(queued, first)) batch.push(queued);
      else rest.push(queued);
    }
    this.entries = rest;
    for (const queued of batch) this.leaving.get(queued)?.();
    return batch;
  }

  /** Every waiting call, removed (to be failed or served another way). */
  takeAll(): Queued[] {
    return this.entries.splice(0);
  }
}

/**
 * Calls cross together only with the same limits. Compared field by field, not as a key string
 * built per call: v8 calls 64 in flight spent ~5% of the host's thread making and comparing those
 * strings. Calls without their own limits share one object, so identity answers nearly always.
 */
export function sameLimits(a: PrefixCallRequest["limits"], b: PrefixCallRequest["limits"]): boolean {
  return (
    a === b ||
    (a.cpuTimeMs === b.cpuTimeMs &&
      a.wallTimeMs === b.wallTimeMs &&
      a.maxOutputBytes === b.maxOutputBytes &&
      a.maxLogEntries === b.maxLogEntries &&
      a.maxLogBytes === b.maxLogBytes &&
      a.maxBridgeCalls === b.maxBridgeCalls &&
      a.maxBridgeCallBytes === b.maxBridgeCallBytes)
  );
}
