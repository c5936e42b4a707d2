import type * as IVM from "isolated-vm";
import { CordonError } from "../../core/errors.js";

/**
 * isolated-vm refuses to generate code from a string longer than the isolate's memory limit in
 * bytes / 8 (its CodeGenCallback, environment.cc): `eval` of it throws "EvalError: Code generation
 * from strings disallowed for this context". The runtime evaluates a script form with an indirect
 * eval (one crossing for the whole run), so a module whose script form passed that length failed
 * as if the guest had thrown (ERR_USER_CODE): past 16,777,216 characters with the default 128 MB,
 * 1,048,576 with 8 MB; esbuild writes each non-ASCII character of a literal as `\uXXXX`, six
 * characters, so 2.8 M characters of CJK text were enough. Compiled from the host
 * (`compileScript`), no such check applies: modules that large take that way.
 */
const EVAL_CHARS_PER_HEAP_BYTE = 1 / 8;

/**
 * What the runtime adds to the script form before its eval (a `//# sourceURL=` line naming the
 * file), with room to spare: the filename is counted on its own.
 */
const EVAL_OVERHEAD_CHARS = 1024;

/** Whether the runtime's eval of a script form of `code`, named `filename`, is allowed in an isolate of `memoryMb`. */
export function evaluableInIsolate(code: string, filename: string, memoryMb: number): boolean {
  return code.length + filename.length + EVAL_OVERHEAD_CHARS <= memoryMb * 1024 * 1024 * EVAL_CHARS_PER_HEAP_BYTE;
}

/**
 * A script form compiled from the host and evaluated to its factory (the function the runtime's
 * `runFactory` calls with esbuild's helpers). Named as the runtime names an eval'd one, so stacks
 * and their source maps read the same either way.
 */
export async function compileFactory(
  isolate: IVM.Isolate,
  context: IVM.Context,
  code: string,
  filename: string,
): Promise<IVM.Reference<unknown>> {
  let script: IVM.Script;
  try {
    script = await isolate.compileScript(code, { filename: sourceName(filename) });
  } catch (error) {
    if (isolate.isDisposed) throw error;
    const message = (error as Error)?.message ?? String(error);
    throw new CordonError("ERR_COMPILE", `${filename}: ${message}`);
  }
  try {
    // The script is one function expression: running it only makes the function.
    return (await script.run(context, { reference: true })) as IVM.Reference<unknown>;
  } finally {
    script.release();
  }
}

/** The runtime's sourceName (guest/runtime.ts): line terminators made "_". */
function sourceName(filename: string): string {
  return filename.replace(/[\n\r\u2028\u2029]/g, "_");
}
