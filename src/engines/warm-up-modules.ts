import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { ENCODED_UNDEFINED } from "../core/codec.js";
import { HELPERS_PARAM, scriptFactory, shareHelpers } from "../core/script-helpers.js";
import { normalizeSource } from "../core/source.js";
import { RUNTIME_FILENAME } from "./guest/bundle.js";

/**
 * Modules as guests write them, in the script form esbuild makes of them (its export helpers,
 * named exports to list, an object and a number to encode, plain and tagged input), that a
 * spare instance runs once before it is handed out (the runtime's `warmUp`). The first twice:
 * V8 tiers a function up on its second run, and that cost belongs here too. Measured on v8,
 * paced one-off p50 1.08 ms -> 0.85 ms against a single `{ default }` module.
 *
 * The build makes their script form once (scripts/build-guest-runtime.mjs writes PREBUILT beside
 * this module in dist/): made here, they started esbuild's service (~160 ms of CPU, a 13 MB
 * process) in every process-host worker, which compiles nothing else. Where the file is missing
 * or was made from other modules (tests run the TypeScript sources), esbuild makes them here.
 */
const OBJECT_MODULE = "export const config = { retries: [1] };\nexport default (input) => ({ ok: true, input })";
const WARM_UP_RUNS = [
  { source: OBJECT_MODULE, inputText: ' {"n":1}' },
  { source: OBJECT_MODULE, inputText: ' {"n":2}' },
  { source: "export default () => 1", inputText: ENCODED_UNDEFINED },
];
const WARM_UP_FALLBACK = "(function () { return { default: () => 0 }; })";

/** The build's warm-up modules, beside this module in dist/. */
const PREBUILT = new URL("./warm-up-modules.json", import.meta.url);

/** What the build writes: the modules' JSON, the helpers' name it was made with, and what it was made from. */
interface Prebuilt {
  runsSha256: string;
  helpersParam: string;
  json: string;
}

let modules: Promise<string> | undefined;

/** The warm-up runs as the runtime's `warmUp` takes them: JSON of [{ code, inputText, filename }]. */
export function warmUpModulesJson(): Promise<string> {
  if (!modules) {
    const prebuilt = readPrebuilt(PREBUILT);
    modules = prebuilt !== undefined ? Promise.resolve(prebuilt) : made();
  }
  return modules;
}

function made(): Promise<string> {
  return Promise.all(
    WARM_UP_RUNS.map(async ({ source, inputText }) => ({
      code: (await normalizeSource(source, RUNTIME_FILENAME)).script?.code ?? WARM_UP_FALLBACK,
      inputText,
      filename: RUNTIME_FILENAME,
    })),
  ).then((list) => JSON.stringify(list));
}

/**
 * The prebuilt modules in `file` when they were made from these runs. The helpers' parameter is
 * named with a suffix drawn per process (core/script-helpers.ts): the build's is put back as
 * this process's, so its name lives only in code made here, as a module compiled here does.
 */
export function readPrebuilt(file: URL | string): string | undefined {
  let saved: Partial<Prebuilt> | null;
  try {
    saved = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
  if (typeof saved?.json !== "string" || typeof saved.helpersParam !== "string" || saved.runsSha256 !== runsSha256())
    return undefined;
  return saved.json.split(saved.helpersParam).join(HELPERS_PARAM);
}

/** For the build: make the modules' script form with esbuild and write it where `warmUpModulesJson` looks. */
export async function writePrebuilt(file: URL | string = PREBUILT): Promise<void> {
  const prebuilt: Prebuilt = { runsSha256: runsSha256(), helpersParam: HELPERS_PARAM, json: await made() };
  writeFileSync(file, JSON.stringify(prebuilt));
}

/**
 * What the modules are made from: the runs, and what makes their script form (esbuild's version,
 * cordon's wrapping of its output). A file made by another build (a partial one, or an upgrade)
 * is not used: its code could expect helpers this runtime no longer passes, and a warm-up that
 * fails is silent (on the v8 process host its worker waited 3 s for spares that never came).
 */
function runsSha256(): string {
  let esbuild = "";
  try {
    esbuild = String((createRequire(import.meta.url)("esbuild/package.json") as { version?: unknown }).version);
  } catch {}
  return createHash("sha256")
    .update(JSON.stringify([WARM_UP_RUNS, RUNTIME_FILENAME, WARM_UP_FALLBACK, esbuild]))
    .update(scriptFactory.toString())
    .update(shareHelpers.toString())
    .digest("hex");
}
