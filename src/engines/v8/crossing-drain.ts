/**
 * A bound on what an isolate's crossings leave alive while they stream in.
 *
 * isolated-vm runs the tasks queued for an isolate in one loop (IsolateEnvironment::AsyncEntry)
 * under ONE HandleScope, and an async `apply` opens none of its own: each crossing's arguments
 * (and its result) stay referenced from that scope until the queue is found empty and the loop
 * ends. A host that keeps the queue busy keeps them all. Measured: a guest awaiting a host
 * function that answered 256 KB at once, holding none of it, failed ERR_MEMORY_LIMIT at its
 * 141st answer in a 32 MB isolate (a heap snapshot: 121 answers retained by one handle scope);
 * answered 1 ms later, the loop ended between answers and 500 went through.
 *
 * So: past `budgetChars` crossed since the loop last had the chance to end, the next crossing
 * waits until none is in flight (the isolate's thread then finds its queue empty: its last task
 * handed the result back before it looked), and crossings keep their order behind it. A stream of
 * small crossings never waits; one of large texts pays one round trip every `budgetChars`.
 */
export class CrossingDrain {
  private inFlight = 0;
  /** Characters crossed (arguments and string results) since the crossings in flight were last none. */
  private chars = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly budgetChars: number) {}

  /** Make the crossing now, or once those in flight have ended when past the budget. */
  through<T>(chars: number, cross: () => Promise<T>): Promise<T> {
    if (this.waiting.length === 0 && !this.full()) return this.start(chars, cross);
    return new Promise<T>((resolve, reject) => {
      this.waiting.push(() => this.start(chars, cross).then(resolve, reject));
    });
  }

  /** Crossings waiting for the loop to end (for tests). */
  get queued(): number {
    return this.waiting.length;
  }

  private full(): boolean {
    return this.inFlight > 0 && this.chars >= this.budgetChars;
  }

  private start<T>(chars: number, cross: () => Promise<T>): Promise<T> {
    this.inFlight++;
    this.chars += chars;
    let crossing: Promise<T>;
    try {
      crossing = cross();
    } catch (error) {
      crossing = Promise.reject(error);
    }
    crossing.then(this.ended, this.ended);
    return crossing;
  }

  private readonly ended = (result: unknown): void => {
    if (typeof result === "string") this.chars += result.length;
    if (--this.inFlight > 0) return;
    this.chars = 0;
    while (this.waiting.length > 0 && !this.full()) (this.waiting.shift() as () => void)();
  };
}
