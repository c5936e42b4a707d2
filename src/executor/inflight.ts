/**
 * The runs the service is answering now, for a graceful shutdown: wait for them to finish,
 * or abort them. A run counts until its response has been written out (or its client is gone),
 * not merely until its handler returned.
 */
export class InFlight {
  private readonly runs = new Set<AbortController>();
  private waiters: (() => void)[] = [];

  get size(): number {
    return this.runs.size;
  }

  /** Track one run; the returned function ends it (calling it twice is harmless). */
  add(controller: AbortController): () => void {
    this.runs.add(controller);
    return () => {
      if (!this.runs.delete(controller) || this.runs.size > 0) return;
      const waiters = this.waiters;
      this.waiters = [];
      for (const wake of waiters) wake();
    };
  }

  /** Resolves true when no run is in flight, or false after `timeoutMs`. */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.runs.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        resolve(false);
      }, timeoutMs);
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.waiters.push(wake);
    });
  }

  abortAll(reason: string): void {
    for (const controller of this.runs) controller.abort(new Error(reason));
  }
}
