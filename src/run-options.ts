/**
 * What sandbox.run, prepare, prefix.run and prefix.call accept: their keys, and the checks of the
 * options that take more than a type check.
 */
import { checkKnownKeys, checkObject, checkString, ownOptions } from "./core/options.js";
import { ownData } from "./core/own-data.js";
import type { RunOptions } from "./core/types.js";
import { isValidExportPath } from "./names.js";

export const RUN_KEYS = [
  "code",
  "input",
  "call",
  "filename",
  "globals",
  "imports",
  "limits",
  "signal",
  "capabilities",
  "files",
  "partitionKey",
];
export const PREPARE_KEYS = [
  "code",
  "filename",
  "globals",
  "imports",
  "limits",
  "partitionKey",
  "capabilities",
  "files",
  "signal",
];
export const PREFIX_RUN_KEYS = ["code", "input", "filename", "limits", "signal"];
export const CALL_KEYS = ["export", "args", "limits", "signal"];

export function checkExportPath(path: unknown, name: string): asserts path is string {
  if (!isValidExportPath(path)) {
    throw new TypeError(
      `cordon: ${name} must be a dotted export path such as "default" or "default.fetch", got ${JSON.stringify(path)}`,
    );
  }
}

/**
 * Run, prepare and call options as ownOptions copies them (own keys, each read once, no
 * prototype), with the nested objects read more than once copied too: only the copies are used.
 */
export function ownRunOptions<T>(options: T, keys: string[], where: string): T {
  const own = ownOptions(options, keys, where);
  if (own.capabilities !== undefined) {
    own.capabilities = ownData(ownOptions(own.capabilities, ["net", "import"], "capabilities"), "capabilities");
  }
  if (own.call !== undefined) own.call = ownOptions(own.call, ["export", "args"], "call");
  return own as T;
}

/** A run's or prefix's tenant: "" when none (instances and Deno processes are kept per key). */
export function checkPartitionKey(value: unknown): string {
  return value === undefined ? "" : checkString(value, "partitionKey", 256);
}

/** `run({ call: { export, args } })`: which export a one-off run calls instead of the default with `input`. */
export function checkRunCall(options: RunOptions): { export: string; args: unknown[] } | undefined {
  const call = options.call;
  if (call === undefined) return undefined;
  checkObject(call, "call");
  checkKnownKeys(call, ["export", "args"], "call");
  checkExportPath(call.export, "call.export");
  if (call.args !== undefined && !Array.isArray(call.args)) throw new TypeError("cordon: call.args must be an array");
  if (options.input !== undefined) throw new TypeError("cordon: a run takes input or call, not both (call passes args)");
  return { export: call.export, args: call.args ?? [] };
}
