import type { TransformOptions } from "esbuild";
import { type CompileBound, DEFAULT_BOUND, firstErrorText, withEsbuild } from "./esbuild-calls.js";
import { CordonError } from "./errors.js";
import { MAX_NESTING, scanNesting } from "./nesting.js";
import { EXPORTS_NAME, scriptFactory } from "./script-helpers.js";
import type { EncodedLineMap, LineMap } from "./source-map.js";
import { nulSpecifierRefusal } from "./specifiers.js";

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
/**
 * What the cache may hold, in characters of its keys, code and maps. Unbounded but by count, it
 * kept 512 modules of any size: 0.9 M-character modules grew the host heap by 275 MB a run, to
 * 3.9 GB. A module past an eighth of it is not kept (compiling it again costs less than holding it).
 */
const CACHE_CHARS = 32 * 1024 * 1024;
interface CacheEntry {
  value: GuestSource | CordonError;
  chars: number;
}
/**
 * By code, then by filename. Keyed by the code itself, not by a key joined from both: a joined
 * key was a new string each run, copied and hashed whole (a paced one-off's lookup took ~12 µs
 * for a one-line module here); V8 keeps a string's hash, so a caller's same text hashes once.
 */
const cache = new Map<string, Map<string, CacheEntry>>();
let cachedEntries = 0;
let cachedChars = 0;

/**
 * The normalized form of `code` if it is cached, without waiting: a run of a module seen before
 * needs no compile (and no await: each was a few µs of a one-off run). Throws a cached refusal.
 */
export function cachedSource(code: string, filename = DEFAULT_FILENAME): GuestSource | undefined {
  const cached = cache.get(code)?.get(filename)?.value;
  if (cached instanceof CordonError) throw cached;
  return cached;
}

/**
 * Turn guest text into an ES module: TypeScript is stripped (no type check, no bundling), and a
 * function body with a top-level `return` becomes `export default async function (input) {...}`.
 *
 * The parser decides, never a pattern: the text is parsed as a module (a trailing `export {}`
 * fixes the parse goal), and only esbuild's own top-level-return error causes the wrap. The wrap
 * keeps the body on its original lines so stack traces point at the caller's line numbers.
 */
export async function normalizeSource(
  code: string,
  filename = DEFAULT_FILENAME,
  bound: CompileBound = DEFAULT_BOUND,
): Promise<GuestSource> {
  const cached = cachedSource(code, filename);
  if (cached) return cached;
  // The text as given: a hashbang is blanked below, and the cache is asked with the caller's text.
  const key = code;
  let result: GuestSource | CordonError;
  const verdict = scanNesting(code);
  if (verdict) {
    result = new CordonError("ERR_COMPILE", `${filename}: ${refusal(verdict)}`);
    remember(key, filename, result);
    throw result;
  }
  // One deadline for every transform this module needs (module, script, wrapped forms).
  const limit: Limit = {
    deadline: performance.now() + bound.timeoutMs,
    timeoutMs: bound.timeoutMs,
    signals: bound.signals,
    filename,
  };
  // A hashbang line is valid at a module's start only; the wrap and the script form would put it
  // inside a function (a SyntaxError when the run starts). Blanked, the line count stays.
  if (code.startsWith("#!")) code = code.replace(/^#![^\n\r\u2028\u2029]*/, "");
  try {
    result = { ...(await strip(code, limit)), filename, wrapped: false, script: await asScript(code, limit) };
  } catch (error) {
    // Not about the guest's text (esbuild failed, or the compile ran past its bound or was
    // aborted): its error, and nothing remembered.
    if (error instanceof CordonError) throw error;
    if (firstErrorText(error) === TOP_LEVEL_RETURN) {
      try {
        const body = `${WRAP_START}${code}\n}`;
        const stripped = await strip(body, limit);
        const script = await asScript(body, limit);
        // Positions on the body's first line count from its own start, not the wrapper's.
        result = {
          code: stripped.code,
          lineMap: unwrapped(stripped.lineMap),
          filename,
          wrapped: true,
          script: script && { code: script.code, lineMap: unwrapped(script.lineMap) },
        };
      } catch (wrappedError) {
        if (wrappedError instanceof CordonError) throw wrappedError;
        result = compileError(await withoutTail(wrappedError, `${WRAP_START}${code}`, limit), filename, WRAP_START.length);
      }
    } else {
      result = compileError(await withoutTail(error, code, limit), filename);
    }
  }
  if (!(result instanceof CordonError)) result = (await nulSpecifierRefusal(result.code)) ?? result;
  remember(key, filename, result);
  if (result instanceof CordonError) throw result;
  return result;
}

/**
 * Syntax esbuild lowers although the target is esnext: `using` and `await using` (esbuild passes
 * them through, and neither Node 20's V8 nor QuickJS parses them: a SyntaxError with no position
 * when the run started). The guest runtime defines Symbol.dispose and Symbol.asyncDispose.
 */
const LOWERED = { using: false };

/** What bounds one module's transforms, and the name its errors use. */
interface Limit extends CompileBound {
  deadline: number;
  filename: string;
}

async function strip(code: string, limit: Limit): Promise<{ code: string; lineMap: EncodedLineMap }> {
  const { filename } = limit;
  const out = await transformGuest(limit, `${code}\nexport {};`, {
    loader: loaderFor(filename),
    format: "esm",
    target: "esnext",
    supported: LOWERED,
    // Non-ASCII text as it is: esbuild's default writes each such character as \uXXXX (six
    // characters for one), which made a CJK module's compiled text six times its size.
    charset: "utf8",
    sourcefile: filename,
    logLevel: "silent",
    sourcemap: "external",
    // The caller's text is not needed in the map (it doubled the map's size).
    sourcesContent: false,
  });
  // Kept encoded: decoded only if a stack is remapped (see LineMap).
  return { code: out.code, lineMap: { mappings: mappingsOf(out.map) } };
}

/**
 * The script form of a module that imports nothing. esbuild refuses top-level await in this
 * format (then there is no script form); output that mentions require, import() or import.meta
 * keeps the module path (a false alarm only costs speed).
 */
async function asScript(code: string, limit: Limit): Promise<{ code: string; lineMap: EncodedLineMap } | undefined> {
  const { filename } = limit;
  try {
    const out = await transformGuest(limit, `${code}\nexport {};`, {
      loader: loaderFor(filename),
      // An IIFE that returns the exports object: unlike CommonJS, no `module` or `exports`
      // binding becomes visible to the guest.
      format: "iife",
      // esbuild shakes trees in this format by default: an unused `/* @__PURE__ */ f()` ran in
      // the module form and not in this one. Both forms must run the same statements.
      treeShaking: false,
      globalName: EXPORTS_NAME,
      target: "esnext",
      supported: LOWERED,
      charset: "utf8",
      sourcefile: filename,
      logLevel: "silent",
      sourcemap: "external",
      sourcesContent: false,
    });
    if (/\brequire\s*\(|\bimport\s*\(|import\.meta/.test(out.code)) return undefined;
    // The wrapper takes a line of its own: the map gets an empty first line to match. The guest
    // runtime passes esbuild's helpers in (see script-helpers.ts).
    return { code: scriptFactory(out.code), lineMap: { mappings: `;${mappingsOf(out.map)}` } };
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
async function withoutTail(error: unknown, text: string, limit: Limit): Promise<unknown> {
  const line = (error as { errors?: { location?: { line?: number } }[] })?.errors?.[0]?.location?.line;
  if (line === undefined || line <= text.split("\n").length) return error;
  try {
    await transformGuest(limit, text, { loader: loaderFor(limit.filename), format: "esm", target: "esnext", logLevel: "silent" });
  } catch (bare) {
    if (bare instanceof CordonError) throw bare;
    if (firstErrorText(bare) !== undefined) return bare;
  }
  return error;
}

/** esbuild's transform, through `withEsbuild`, within the module's limit. */
function transformGuest(limit: Limit, code: string, options: TransformOptions): Promise<{ code: string; map: string }> {
  return withEsbuild({ kind: "transform", code, options }, limit);
}

/** The text a function body is wrapped in, on the body's first line. */
const WRAP_START = "export default async function (input) {";

/** `map` with the wrapper's width taken off the columns of the original text's first line. */
function unwrapped(map: EncodedLineMap): EncodedLineMap {
  return { mappings: map.mappings, firstLineShift: WRAP_START.length };
}

/** The "mappings" of esbuild's source map JSON. */
function mappingsOf(map: string): string {
  return (JSON.parse(map) as { mappings: string }).mappings;
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

/** Why the scan refused a module, said so the caller can act on it. */
function refusal(verdict: NonNullable<ReturnType<typeof scanNesting>>): string {
  if (verdict.kind === "deep") return `the code nests brackets or statements more than ${MAX_NESTING} levels deep`;
  if (verdict.kind === "large") {
    // The scan stops at the cap: the estimate says only that much.
    return `the compiled module would be too large (esbuild's output, indented two spaces a level, past ${Math.round(verdict.estimate / 2 ** 20)} Mi characters): nest less deeply or split the module`;
  }
  return "the code's regular expressions and divisions could not be told apart cheaply: put them on lines of their own";
}

/** Keep `value` for `code` under `filename`; past the bounds, the oldest code goes first, with every filename it was run under. */
function remember(code: string, filename: string, value: GuestSource | CordonError): void {
  const chars = code.length + filename.length + (value instanceof CordonError ? value.message.length : sourceChars(value));
  if (chars > CACHE_CHARS / 8) return;
  const previous = cache.get(code)?.get(filename);
  if (previous) {
    cache.get(code)?.delete(filename);
    cachedEntries--;
    cachedChars -= previous.chars;
  }
  while (cache.size > 0 && (cachedEntries >= CACHE_SIZE || cachedChars + chars > CACHE_CHARS)) {
    const [oldest, byName] = cache.entries().next().value as [string, Map<string, CacheEntry>];
    cache.delete(oldest);
    for (const entry of byName.values()) {
      cachedEntries--;
      cachedChars -= entry.chars;
    }
  }
  let byName = cache.get(code);
  if (!byName) {
    byName = new Map();
    cache.set(code, byName);
  }
  byName.set(filename, { value, chars });
  cachedEntries++;
  cachedChars += chars;
}

function sourceChars(source: GuestSource): number {
  const mapChars = (map: LineMap) => (Array.isArray(map) ? 4 * map.length : map.mappings.length);
  return (
    source.code.length +
    mapChars(source.lineMap) +
    (source.script ? source.script.code.length + mapChars(source.script.lineMap) : 0)
  );
}
