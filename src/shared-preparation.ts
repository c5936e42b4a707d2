import { whenAborted } from "./core/when-aborted.js";

/**
 * One prefix evaluation, shared by every `prepare` of the same key while it is in progress, and
 * the callers still waiting for it. A caller's `signal` ends its own wait at once. When every
 * caller has left while the evaluation still waits for a run slot, the queue drops it: a client
 * that goes away takes its queued work with it (the executor's cold `/run`s kept every slot busy
 * with modules whose clients had closed their connections: red team, 2026-12-05). One already
 * evaluating runs to its own limits (no engine stops an evaluation midway on every host) and is
 * disposed as it finishes if nobody holds it by then.
 */
export class SharedPreparation<T extends { pool: { dispose(): void } }> {
  /** Prefix handles given out, and callers still waiting for one: the sandbox's releasePrefix counts them down. */
  handles = 0;
  readonly ready: Promise<T>;
  /** It holds a run slot: from then on it runs to its own limits. */
  private started = false;
  private settled = false;
  private waiting = 0;
  private readonly wanted = new AbortController();

  /**
   * `evaluate` gets the signal that aborts once nobody waits (for the slot queue) and calls
   * `start` when it holds a slot. `forget` takes this preparation out of the sandbox's map (when
   * it failed or was dropped, so the next caller starts afresh).
   */
  constructor(
    evaluate: (wanted: AbortSignal, start: () => void) => Promise<T>,
    private readonly forget: () => void,
  ) {
    this.ready = evaluate(this.wanted.signal, () => {
      this.started = true;
    });
    this.ready.then(
      (made) => {
        this.settled = true;
        if (this.handles > 0) return;
        forget();
        made.pool.dispose();
      },
      () => {
        this.settled = true;
        forget();
      },
    );
  }

  /** Evaluating, with nobody waiting for it any more: it holds its run slot until it finishes. */
  get unclaimed(): boolean {
    return this.started && !this.settled && this.waiting === 0;
  }

  /** The evaluation, for one caller: `signal` ends this caller's wait with the error `aborted` makes. */
  async wait(signal: AbortSignal | undefined, aborted: () => unknown): Promise<T> {
    this.handles++;
    this.waiting++;
    try {
      return await (signal ? this.until(signal, aborted) : this.ready);
    } catch (error) {
      this.handles--;
      throw error;
    } finally {
      this.waiting--;
      if (this.waiting === 0 && !this.settled && !this.started) {
        this.forget();
        this.wanted.abort(new Error("every caller waiting for the prefix left"));
      }
    }
  }

  private until(signal: AbortSignal, aborted: () => unknown): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const stop = whenAborted([signal], () => reject(aborted()));
      this.ready.then(
        (made) => {
          stop();
          resolve(made);
        },
        (error: unknown) => {
          stop();
          reject(error);
        },
      );
    });
  }
}
