/**
 * The guest runtime's script in a new isolate: compiled (from V8's code cache after the first),
 * and warmed up for instances made ahead.
 */
import type * as IVM from "isolated-vm";
import { guestRuntimeScript, RUNTIME_FILENAME } from "../guest/bundle.js";
import { warmUpModulesJson } from "../warm-up-modules.js";

type Ref = IVM.Reference<(...args: unknown[]) => unknown>;

type CachedScript = IVM.Script & { cachedData?: IVM.ExternalCopy<ArrayBuffer>; cachedDataRejected?: boolean };

/**
 * V8's code cache of the runtime script. The first isolate of this process makes one at compile
 * time, which holds only the functions V8 compiles eagerly; `recacheRuntime` replaces it, once,
 * with one made after a bootstrap and a warm-up, which holds every function they compiled.
 */
let runtimeCache: IVM.ExternalCopy<ArrayBuffer> | undefined;
let recached = false;

/** Compile the runtime script, reusing V8's code cache after the first isolate (saves ~1 ms each). */
export async function compileRuntime(isolate: IVM.Isolate): Promise<IVM.Script> {
  if (runtimeCache) {
    const options = { filename: RUNTIME_FILENAME, cachedData: runtimeCache };
    const script = (await isolate.compileScript(guestRuntimeScript(), options)) as CachedScript;
    if (!script.cachedDataRejected) return script;
  }
  const options = { filename: RUNTIME_FILENAME, produceCachedData: true };
  const script = (await isolate.compileScript(guestRuntimeScript(), options)) as CachedScript;
  if (script.cachedData) runtimeCache = script.cachedData;
  return script;
}

/**
 * Once per process, after an isolate bootstrapped the runtime and ran the warm-up (cordon's own
 * code only; no guest has run in it): compile the same script again in that isolate, which finds
 * it in the isolate's compilation cache with the functions V8 compiled lazily since, and keep the
 * code cache of that. Later isolates then read those functions' bytecode instead of parsing and
 * compiling them on first call. A code cache holds bytecode, never the heap's objects or feedback.
 */
export async function recacheRuntime(isolate: IVM.Isolate): Promise<void> {
  if (recached) return;
  recached = true;
  const options = { filename: RUNTIME_FILENAME, produceCachedData: true };
  const script = (await isolate.compileScript(guestRuntimeScript(), options)) as CachedScript;
  if (script.cachedData) runtimeCache = script.cachedData;
}

/**
 * A few runs of cordon's own modules (../warm-up-modules.ts) before the instance is handed out: V8
 * compiles functions lazily, on their first call, and tiers them up on later ones, so without them
 * the first (and, for a one-off run, only) run pays for that — half of a one-off run's time
 * (measured: p50 1.2–1.5 ms without, 0.67 ms with the first such warm-up). No guest code runs;
 * the next `begin` resets everything they touched, and their outcomes reach no listener (the
 * instance has none yet).
 */
export async function warmUp(refs: Record<"warmUp" | "ping", Ref>): Promise<void> {
  // One crossing for all of them; their outcomes are not reported (each report would be a round
  // trip to this thread, which may be busy making another isolate).
  await refs.warmUp.apply(undefined, [await warmUpModulesJson()]);
  // The outcomes settle in microtasks after the call: the ping returns once they have run.
  await refs.ping.apply(undefined, []);
}
