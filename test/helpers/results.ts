import type { RunResult } from "../../src/index.js";

/** A completed result's value; anything else fails the test with what it was. */
export function value(result: RunResult): unknown {
  if (!result.ok) throw new Error(`expected completed, got ${result.status}: ${JSON.stringify(result.error)}`);
  return result.value;
}

/** "completed", or the error's code. */
export const code = (result: RunResult) => (result.ok ? "completed" : result.error.code);
