import { stop, type TransformOptions, transform } from "esbuild";
import { CordonError } from "./errors.js";
import { MAX_NESTING, nestsDeeperThan } from "./nesting.js";
import { EXPORTS_NAME, HELPERS_PARAM, shareHelpers } from "./script-helpers.js";
import { type LineMap, decodeMappings } from "./source-map.js";

/** A guest module ready for an engine: plain JavaScript ESM, named for stack traces. */
export interface GuestSource {
  code: string;
  filename: string;
  /** True when the input was a function body and was wrapped into a default-exported function. */
  wrapped: boolean;
  /** Maps positions in `code` back to the caller's text, for stack traces. */
  lineMap: LineMap;
  /**
   * The same module as a script, when it has no imports and no top-level await: a function
   * that evaluates the module and returns its exports object. Engines evaluate it in one step instead of
   * compiling, linking and evaluating a module graph (about half of a one-off run's time).
   */
  script?: { code: string; lineMap: LineMap };
}

export const DEFAULT_FILENAME = "<guest>";
const TOP_LEVEL_RETURN = "Top-level return cannot be used inside an ECMAScript module";
const CACHE_SIZE = 512;
const cache = new Map<string, GuestSource | CordonError>();

/**
 * Turn guest text into an ES module: TypeScript is stripped (no type check, no bundling), and a
 * function body with a top-level `return` becomes `export default async function (input) {...}`.
 *
 * The parser decides, never a pattern: the text is parsed as a module (a trailing `export {}`
 * fixes the parse goal), and only esbuild's own top-level-return error causes the wrap. The wrap
 * keeps the body on its original lines so stack traces point at the caller's line numbers.
 */
export async function normalizeSource(code: string, filename = DEFAULT_FILENAME): Promise<GuestSource> {
  // The filename's length first: no filename and code can make another pair's key.
  const key = `${filename.length}:${filename}\0${code}`;
  const cached = cache.get(key);
  if (cached) {
    if (cached instanceof CordonError) throw cached;
    return cached;
  }
  let result: GuestSource | CordonError;
  if (nestsDeeperThan(code)) {
    result = new CordonError("ERR_COMPILE", `${filename}: the code nests brackets more than ${MAX_NESTING} levels deep`);
    remember(key, result);
    throw result;
  }
  try {
    result = { ...(await strip(code, filename)), filename, wrapped: false, script: await asScript(code, filename) };
  } catch (error) {
    // esbuild itself failed (not the guest's text): an internal error, and nothing remembered.
    if (error instanceof CordonError) throw error;
    if (firstErrorText(error) === TOP_LEVEL_RETURN) {
      try {
        const body = `${WRAP_START}${code}\n}`;
        const stripped = await strip(body, filename);
        const script = await asScript(body, filename);
        // Positions on the body's first line count from its own start, not the wrapper's.
        result = {
          code: stripped.code,
          lineMap: unwrapped(stripped.lineMap),
          filename,
          wrapped: true,
          script: script && { code: script.code, lineMap: unwrapped(script.lineMap) },
        };
      } catch (wrappedError) {
        result = compileError(await withoutTail(wrappedError, `${WRAP_START}${code}`, filename), filename, WRAP_START.length);
      }
    } else {
      result = compileError(await withoutTail(error, code, filename), filename);
    }
  }
  remember(key, result);
  if (result instanceof CordonError) throw result;
  return result;
}

async function strip(code: string, filename: string): Promise<{ code: string; lineMap: LineMap }> {
  const out = await transformGuest(`${code}\nexport {};`, {
    loader: loaderFor(filename),
    format: "esm",
    target: "esnext",
    sourcefile: filename,
    logLevel: "silent",
    sourcemap: "external",
  });
  return { code: out.code, lineMap: decodeMappings((JSON.parse(out.map) as { mappings: string }).mappings) };
}

/**
 * The script form of a module that imports nothing. esbuild refuses top-level await in this
 * format (then there is no script form); output that mentions require, import() or import.meta
 * keeps the module path (a false alarm only costs speed).
 */
async function asScript(code: string, filename: string): Promise<GuestSource["script"]> {
  try {
    const out = await transformGuest(`${code}\nexport {};`, {
      loader: loaderFor(filename),
      // An IIFE that returns the exports object: unlike CommonJS, no `module` or `exports`
      // binding becomes visible to the guest.
      format: "iife",
      // esbuild shakes trees in this format by default: an unused `/* @__PURE__ */ f()` ran in
      // the module form and not in this one. Both forms must run the same statements.
      treeShaking: false,
      globalName: EXPORTS_NAME,
      target: "esnext",
      sourcefile: filename,
      logLevel: "silent",
      sourcemap: "external",
    });
    if (/\brequire\s*\(|\bimport\s*\(|import\.meta/.test(out.code)) return undefined;
    // The wrapper takes a line of its own: the map gets an empty first line to match. The guest
    // runtime passes esbuild's helpers in (see script-helpers.ts).
    const wrapped = `(function (${HELPERS_PARAM}) {"use strict";\n${shareHelpers(out.code)}\nreturn ${EXPORTS_NAME};\n})`;
    const mappings = (JSON.parse(out.map) as { mappings: string }).mappings;
    return { code: wrapped, lineMap: [[], ...decodeMappings(mappings)] };
  } catch (error) {
    if (error instanceof CordonError) throw error;
    return undefined;
  }
}

function loaderFor(filename: string): "js" | "ts" {
  return /\.(?:m|c)?js$/.test(filename) ? "js" : "ts";
}

/**
 * A compile error placed past the caller's last line names cordon's own tail (the `export {}`
 * that fixes the parse goal, or a wrap's closing brace): `Unexpected "export"` on a line the
 * caller never wrote, for an unclosed `{`. Parsed without the tail, `text` fails with the error
 * about the caller's own end ("Expected "}" but found end of file"), which is returned instead.
 */
async function withoutTail(error: unknown, text: string, filename: string): Promise<unknown> {
  const line = (error as { errors?: { location?: { line?: number } }[] })?.errors?.[0]?.location?.line;
  if (line === undefined || line <= text.split("\n").length) return error;
  try {
    await transformGuest(text, { loader: loaderFor(filename), format: "esm", target: "esnext", logLevel: "silent" });
  } catch (bare) {
    if (firstErrorText(bare) !== undefined) return bare;
  }
  return error;
}

/** esbuild's transform, through `withEsbuild`. */
function transformGuest(code: string, options: TransformOptions): ReturnType<typeof transform> {
  return withEsbuild(() => transform(code, options));
}

/**
 * Call esbuild. A failure that is not about the text (its service process was killed, say)
 * leaves every later call failing the same way: the service is stopped, so the next call starts
 * a new one, and the operation is tried once more. Still failing, it is ERR_INTERNAL.
 */
export async function withEsbuild<T>(operation: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await operation();
    } catch (error) {
      if (firstErrorText(error) !== undefined) throw error;
      await stop();
      if (attempt > 0) {
        throw new CordonError(
          "ERR_INTERNAL",
          `the module could not be transformed: esbuild failed (${(error as Error)?.message ?? error})`,
        );
      }
    }
  }
}

function firstErrorText(error: unknown): string | undefined {
  const errors = (error as { errors?: { text?: string }[] })?.errors;
  return Array.isArray(errors) ? errors[0]?.text : undefined;
}

/** The text a function body is wrapped in, on the body's first line. */
const WRAP_START = "export default async function (input) {";

/** `map` with the wrapper's width taken off the columns of the original text's first line. */
function unwrapped(map: LineMap): LineMap {
  return map.map((segments) => {
    const out = segments.slice();
    for (let i = 0; i + 2 < out.length; i += 3) if (out[i + 1] === 0) out[i + 2] = Math.max(0, out[i + 2] - WRAP_START.length);
    return out;
  });
}

/** `firstLineShift`: the wrapper's width, taken off columns on line 1 (a wrapped body's). */
function compileError(error: unknown, filename: string, firstLineShift = 0): CordonError {
  const errors = (error as { errors?: { text: string; location?: { line: number; column: number } }[] })?.errors;
  if (!Array.isArray(errors) || errors.length === 0) {
    return new CordonError("ERR_COMPILE", `${filename}: could not be compiled`);
  }
  const lines = errors.slice(0, 5).map((e) => {
    if (!e.location) return `${filename}: ${e.text}`;
    const { line, column } = e.location;
    const shifted = line === 1 ? Math.max(0, column - firstLineShift) : column;
    return `${filename}:${line}:${shifted + 1}: ${e.text}`;
  });
  return new CordonError("ERR_COMPILE", lines.join("\n"));
}

function remember(key: string, value: GuestSource | CordonError): void {
  if (cache.size >= CACHE_SIZE) cache.delete(cache.keys().next().value as string);
  cache.set(key, value);
}
