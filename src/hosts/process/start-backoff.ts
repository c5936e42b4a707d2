/** The first retry after a start failure is immediate (one bad start may be bad luck); then this, doubling. */
const FIRST_DELAY_MS = 500;
const MAX_DELAY_MS = 30_000;

/**
 * Worker starts that keep failing (a broken install, a full disk, no processes left): the pool
 * waits longer after each consecutive failure instead of forking Node back to back forever, and
 * while it waits, runs fail at once with the reason. A worker that starts resets it.
 */
export class StartBackoff {
  private failures = 0;
  private notBefore = 0;
  private lastCause = "";

  failed(cause: string): void {
    this.failures++;
    this.lastCause = cause;
    const delay = this.failures < 2 ? 0 : Math.min(FIRST_DELAY_MS * 2 ** (this.failures - 2), MAX_DELAY_MS);
    this.notBefore = performance.now() + delay;
  }

  started(): void {
    this.failures = 0;
    this.notBefore = 0;
  }

  /** Why no start may be tried now, or undefined when one may. */
  refusal(): string | undefined {
    const wait = this.notBefore - performance.now();
    if (wait <= 0) return undefined;
    return `worker processes failed to start ${this.failures} times in a row (the last: ${this.lastCause}); the next attempt is in ${Math.ceil(wait)} ms`;
  }
}
