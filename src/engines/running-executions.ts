import type { Execution } from "./execution.js";

const ENDED = "the sandbox was disposed during the run";

/**
 * An engine's executions in progress (one-off runs, prefix runs and calls), so that disposing
 * the engine ends them: no guest code of a disposed sandbox keeps running to its limits.
 */
export class RunningExecutions {
  private readonly executions = new Set<Execution>();
  /** endAll was called: work that starts later (after an instance warmed up) must not run. */
  ended = false;

  /** `outcome` (the execution's), with the execution counted as running until it settles. */
  async track<T>(execution: Execution, outcome: Promise<T>): Promise<T> {
    this.executions.add(execution);
    try {
      return await outcome;
    } finally {
      this.executions.delete(execution);
    }
  }

  /** End every one with ERR_INSTANCE_RESET: their instances are disposed, their guests stop. */
  endAll(): void {
    this.ended = true;
    for (const execution of this.executions) execution.kill("ERR_INSTANCE_RESET", ENDED);
    this.executions.clear();
  }

  /**
   * `start` the work that settles `outcome` (the execution's) and track the execution until it
   * does. After endAll (an instance warmed up for it while the engine was disposed), the
   * execution fails at once and `start` is not called.
   */
  run<T>(execution: Execution, outcome: Promise<T>, start: () => void): Promise<T> {
    if (this.ended) execution.kill("ERR_INSTANCE_RESET", ENDED);
    else start();
    return this.track(execution, outcome);
  }
}
