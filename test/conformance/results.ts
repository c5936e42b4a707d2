import type { CompletedResult, FailedResult, RunResult } from "../../src/index.js";

/** Narrow a result to completed, or fail the test with what it was instead. */
export function completed(result: RunResult): CompletedResult {
  if (result.status !== "completed") throw new Error(`expected completed, got ${result.status}: ${JSON.stringify(result.error)}`);
  return result;
}

/** Narrow a result to failed, or fail the test with what it was instead. */
export function failed(result: RunResult): FailedResult {
  if (result.status !== "failed") throw new Error(`expected failed, got ${result.status}: ${JSON.stringify(result)}`);
  return result;
}

/** "completed", or the error code: one string to compare. */
export function outcome(result: RunResult): string {
  return result.ok ? "completed" : result.error.code;
}
