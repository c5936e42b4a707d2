import { normalizeSource } from "../core/source.js";
import { RUNTIME_FILENAME } from "./guest/bundle.js";

/**
 * Modules as guests write them, in the script form esbuild makes of them (its export helpers,
 * named exports to list, an object and a number to encode, plain and tagged input), that a
 * spare instance runs once before it is handed out (the runtime's `warmUp`). The first twice:
 * V8 tiers a function up on its second run, and that cost belongs here too. Measured on v8,
 * paced one-off p50 1.08 ms -> 0.85 ms against a single `{ default }` module.
 */
const OBJECT_MODULE = "export const config = { retries: [1] };\nexport default (input) => ({ ok: true, input })";
const WARM_UP_RUNS = [
  { source: OBJECT_MODULE, inputText: ' {"n":1}' },
  { source: OBJECT_MODULE, inputText: ' {"n":2}' },
  { source: "export default () => 1", inputText: '{"$":"u"}' },
];
const WARM_UP_FALLBACK = "(function () { return { default: () => 0 }; })";

let modules: Promise<string> | undefined;

/** The warm-up runs as the runtime's `warmUp` takes them: JSON of [{ code, inputText, filename }]. */
export function warmUpModulesJson(): Promise<string> {
  modules ??= Promise.all(
    WARM_UP_RUNS.map(async ({ source, inputText }) => ({
      code: (await normalizeSource(source, RUNTIME_FILENAME)).script?.code ?? WARM_UP_FALLBACK,
      inputText,
      filename: RUNTIME_FILENAME,
    })),
  ).then((list) => JSON.stringify(list));
  return modules;
}
