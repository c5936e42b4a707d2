/**
 * How many characters of host-call answers one run may hold on their way to its guest: encoded
 * by the host and not yet taken in by the guest's engine (an isolate's settle crossing, a worker
 * process's pipe, a QuickJS thread's acknowledgement). Past the cap, the next answer waits to be
 * encoded until an earlier one is delivered; the first answer always passes, so the most held
 * is under `cap` plus one answer.
 *
 * Why: a guest awaited 40 calls of a host function returning one shared 8 MB string (no cost to
 * the host) and every answer was encoded at once, a copy each: the host's RSS reached 450–520 MB
 * under a 64 MB guest limit, on every engine and host. The arguments the other way have had a
 * bound of their own (4 × maxBridgeCallBytes, execution.ts); this is the answers'.
 */
export class AnswerGate {
  private held = 0;
  private waiting: (() => void)[] = [];

  /** `cap`: the run's maxBridgeCallBytes, so a run holds under twice that. */
  constructor(private readonly cap: number) {}

  /** Characters held now (for tests and stats). */
  get heldChars(): number {
    return this.held;
  }

  /**
   * Resolves when an answer may be encoded, or when `signal` aborts (the call is over; the caller
   * checks). Undefined when it may be at once: no promise on the common path. The caller encodes
   * and calls `hold` with no await in between, so the check and the hold are one step.
   */
  turn(signal?: AbortSignal): Promise<void> | undefined {
    // Nothing held: passes whatever the cap (a run is never stuck behind its own empty gate).
    if (this.held === 0 || this.held < this.cap || signal?.aborted) return undefined;
    return new Promise((resolve) => {
      const wake = () => {
        signal?.removeEventListener("abort", wake);
        resolve();
      };
      this.waiting.push(wake);
      signal?.addEventListener("abort", wake, { once: true });
    });
  }

  hold(chars: number): void {
    this.held += chars;
  }

  /** An answer of `chars` held was delivered (or dropped): wake every waiter to check again. */
  release(chars: number): void {
    if (!(chars > 0)) return;
    this.held = Math.max(0, this.held - chars);
    const waiting = this.waiting;
    if (waiting.length === 0) return;
    this.waiting = [];
    for (const wake of waiting) wake();
  }
}
