import { createRequire } from "node:module";
import { CordonError } from "../../core/errors.js";

export type IsolatedVm = typeof import("isolated-vm");

let loaded: IsolatedVm | undefined;
let failure: unknown;

/**
 * Load isolated-vm on first use, never at import time: `cordon/names` and the quickjs engine must
 * work on machines where the native module did not build.
 */
export function loadIsolatedVm(): IsolatedVm {
  if (loaded) return loaded;
  if (failure === undefined) {
    try {
      loaded = createRequire(import.meta.url)("isolated-vm") as IsolatedVm;
      return loaded;
    } catch (error) {
      failure = error;
    }
  }
  throw new CordonError(
    "ERR_ENGINE_UNAVAILABLE",
    `the v8 engine needs the isolated-vm native module, which did not load: ${(failure as Error)?.message ?? failure}`,
  );
}

export function isolatedVmAvailable(): boolean {
  try {
    loadIsolatedVm();
    return true;
  } catch {
    return false;
  }
}
