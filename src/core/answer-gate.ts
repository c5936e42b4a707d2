/**
 * How much of its host-call answers one run may hold on their way to its guest: the bodies being
 * read for them (a Response a host function returned, the brokered fetch's), then their encoded
 * text, until the guest's engine has taken it in (an isolate's settle crossing, a worker
 * process's pipe, a QuickJS thread's acknowledgement). Past the cap, the next answer waits to be
 * encoded, and a body's read waits for its next chunk, until earlier answers are delivered. The
 * first answer always goes on, and so does the oldest body being read while the answers on
 * their way are under the cap: the most held is under `cap` plus one answer (and its body,
 * while it is encoded), plus the chunk each other body being read took before it waited.
 *
 * Why: a guest awaited 40 calls of a host function returning one shared 8 MB string (no cost to
 * the host) and every answer was encoded at once, a copy each: the host's RSS reached 450–520 MB
 * under a 64 MB guest limit, on every engine and host. Returned as a Response, or fetched, each
 * body was read whole before that: 755–892 MB, and 1.1 GB for 150 fetches of 8 MB (red team).
 * The arguments the other way have had a bound of their own (4 × maxBridgeCallBytes,
 * execution.ts); this is the answers'.
 */
export class AnswerGate {
  private held = 0;
  private waiting: (() => void)[] = [];
  /** Bodies being read, oldest first (see mayRead). */
  private readonly readings: BodyReading[] = [];
  /** What of `held` those bodies hold so far (the rest is answers on their way). */
  private readingBytes = 0;

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
    return this.wait(signal);
  }

  hold(chars: number): void {
    this.held += chars;
  }

  /** An answer of `chars` held was delivered (or dropped): wake every waiter to check again. */
  release(chars: number): void {
    if (!(chars > 0)) return;
    this.held = Math.max(0, this.held - chars);
    this.wake();
  }

  /** An answer's body may be read: its bytes count as they arrive (`BodyReading.chunk`). */
  reading(signal?: AbortSignal): BodyReading {
    return new BodyReading(this, signal);
  }

  /**
   * @internal BodyReading.chunk: `bytes` more arrived; wait, unless the oldest, while the run
   * holds its cap. Bodies are in line from their first chunk, not their call: a call still
   * waiting for its host function must not hold up the bodies being read.
   */
  read(reading: BodyReading, bytes: number, signal: AbortSignal | undefined, first: boolean): Promise<void> | undefined {
    if (first) this.readings.push(reading);
    this.held += bytes;
    this.readingBytes += bytes;
    if (this.mayRead(reading, signal)) return undefined;
    return (async () => {
      while (!this.mayRead(reading, signal)) await this.wait(signal);
    })();
  }

  /**
   * A body reads on while the run holds under its cap. Past it, the oldest body still reads on
   * when the answers on their way alone are under it: else, with the cap full of bodies half
   * read, each waiting for room, none would ever end. Answers are delivered whatever a body does.
   */
  private mayRead(reading: BodyReading, signal: AbortSignal | undefined): boolean {
    if (this.held < this.cap || signal?.aborted === true) return true;
    return this.readings[0] === reading && this.held - this.readingBytes < this.cap;
  }

  /** @internal BodyReading.end: its bytes are no longer counted (its answer holds what it encoded). */
  ended(reading: BodyReading, bytes: number): void {
    if (bytes === 0) return;
    const at = this.readings.indexOf(reading);
    if (at >= 0) this.readings.splice(at, 1);
    this.held = Math.max(0, this.held - bytes);
    this.readingBytes = Math.max(0, this.readingBytes - bytes);
    // A new oldest may read on.
    this.wake();
  }

  private wait(signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        signal?.removeEventListener("abort", wake);
        resolve();
      };
      this.waiting.push(wake);
      signal?.addEventListener("abort", wake, { once: true });
    });
  }

  private wake(): void {
    const waiting = this.waiting;
    if (waiting.length === 0) return;
    this.waiting = [];
    for (const wake of waiting) wake();
  }
}

/** One body being read for an answer, counted in its run's gate as it arrives. */
export class BodyReading {
  private bytes = 0;
  private over = false;

  constructor(
    private readonly gate: AnswerGate,
    private readonly signal: AbortSignal | undefined,
  ) {}

  /** Has any of the body been counted (its answer then waits as its next chunk would: `encodable`)? */
  get counted(): boolean {
    return this.bytes > 0;
  }

  /** `bytes` of the body arrived: await what this returns before reading on (undefined: read on). */
  readonly chunk = (bytes: number): Promise<void> | undefined => {
    // An empty chunk adds nothing: it neither puts the body in line nor waits.
    if (this.over || !(bytes > 0)) return undefined;
    const first = this.bytes === 0;
    this.bytes += bytes;
    return this.gate.read(this, bytes, this.signal, first);
  };

  /**
   * The body is read: its answer may be encoded when what this returns settles (undefined: now).
   * It waits as a chunk would: a body read whole in one chunk (an in-memory Response) took no
   * turn before, and 40 such were encoded at once.
   */
  encodable(): Promise<void> | undefined {
    if (this.over || this.bytes === 0) return undefined;
    return this.gate.read(this, 0, this.signal, false);
  }

  /** The body is read, refused or dropped, and its answer (if any) holds its own encoded text. */
  end(): void {
    if (this.over) return;
    this.over = true;
    this.gate.ended(this, this.bytes);
  }
}
