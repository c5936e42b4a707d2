import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { dirname, join, relative, sep } from "node:path";
import { pathToFileURL } from "node:url";
import { init as initLexer, parse as parseImports } from "es-module-lexer";
import { type CompileBound, withEsbuild } from "../../core/esbuild-calls.js";
import { hostModuleSources } from "../../core/bindings.js";
import type { LineMap } from "../../core/source-map.js";
import { type GuestSource, normalizeSource } from "../../core/source.js";

/** A multi-file source: at most this many files and bytes (the entry not counted). */
export const MAX_FILES = 256;
export const MAX_FILES_BYTES = 20 * 1024 * 1024;

const SCHEMES = /^(?:node|npm|jsr|https?|data|file|blob):/;

/**
 * Where a specifier goes in a Deno process. Source imports and host modules become files of the
 * private directory; relative paths stay (the files of a multi-file source are written beside the
 * entry); Node builtins get `node:`; every other bare specifier becomes `npm:`.
 */
export function rewriteSpecifier(
  specifier: string,
  local: {
    sourceImports: ReadonlySet<string>;
    hostModules: ReadonlySet<string>;
    fileUrl(kind: "i" | "h", s: string): string;
    /** Appended to the guest's own modules (`?r=<run>`): each run evaluates them afresh. */
    run?: string;
  },
): string {
  const run = local.run ?? "";
  if (local.hostModules.has(specifier)) return local.fileUrl("h", specifier);
  if (local.sourceImports.has(specifier) && !isRelative(specifier)) return `${local.fileUrl("i", specifier)}${run}`;
  if (isRelative(specifier)) return `${specifier}${run}`;
  if (SCHEMES.test(specifier)) return specifier;
  if (isBuiltin(specifier)) return `node:${specifier}`;
  return `npm:${specifier}`;
}

function isRelative(specifier: string): boolean {
  return specifier.startsWith("./") || specifier.startsWith("../") || specifier.startsWith("/");
}

const recordCache = new Map<string, string[]>();
/** The entry's name in esbuild's metafile. */
const GUEST = "<guest>";

/** The module specifiers a module imports, as esbuild's parser finds them (static, re-exports, literal import()). */
export async function importSpecifiers(code: string, bound?: CompileBound): Promise<string[]> {
  const key = createHash("sha256").update(code).digest("base64");
  const cached = recordCache.get(key);
  if (cached) return cached;
  // The metafile lists every import esbuild's parser found, each left external: no plugin needed
  // (a plugin is a function, and esbuild's calls run on a thread functions cannot be sent to).
  const { metafile } = await withEsbuild(
    {
      kind: "build",
      options: {
        stdin: { contents: code, loader: "js", sourcefile: GUEST },
        bundle: true,
        write: false,
        format: "esm",
        logLevel: "silent",
        platform: "neutral",
        external: ["*"],
        metafile: true,
      },
    },
    bound,
  );
  const found = new Set((metafile?.inputs[GUEST]?.imports ?? []).map((record) => record.path));
  const list = [...found];
  if (recordCache.size >= 512) recordCache.delete(recordCache.keys().next().value as string);
  recordCache.set(key, list);
  return list;
}

/**
 * Replace import specifiers (static, re-exports, literal import()) at the positions
 * es-module-lexer finds them. A pattern over the text also rewrote `from "db"` inside the
 * guest's own strings, comments and regular expressions, handing it the private directory's
 * path as data.
 */
export async function replaceSpecifiers(code: string, map: Map<string, string>): Promise<string> {
  await initLexer;
  const [imports] = parseImports(code);
  let out = "";
  let at = 0;
  for (const { n: name, s: start, e: end, d: dynamic } of imports) {
    const to = name === undefined ? undefined : map.get(name);
    if (to === undefined || to === name || dynamic === -2) continue;
    // A static import's span is the text between the quotes (replaced with them); a literal
    // import()'s includes them.
    const quotes = dynamic === -1 ? 1 : 0;
    out += code.slice(at, start - quotes) + JSON.stringify(to);
    at = end + quotes;
  }
  return out + code.slice(at);
}

export interface WrittenGraph {
  /** The entry's URL, unique per evaluation so every run gets a fresh module instance. */
  url: string;
  /** Guest-visible names by absolute path in the private directory (for stack traces and messages). */
  names: Map<string, string>;
  lineMaps: Map<string, LineMap>;
}

let evaluationSeq = 0;

/** Write a guest module and what it imports into `dir`, rewriting specifiers for Deno. */
export async function writeGraph(
  dir: string,
  source: GuestSource,
  sourceImports: Record<string, string>,
  bindingsText: string | undefined,
  bound?: CompileBound,
): Promise<WrittenGraph> {
  const hostSources = hostModuleSources(bindingsText ?? "{}");
  // The function's own modules (its files and source imports) are evaluated afresh on every run,
  // as the entry is: a value one run left in a module's scope never reaches the next.
  const run = `?r=${++evaluationSeq}`;
  const names = new Map<string, string>();
  const lineMaps = new Map<string, LineMap>();
  const hash = (s: string) => createHash("sha256").update(s).digest("hex").slice(0, 24);
  const pathFor = (kind: "i" | "h", specifier: string) => join(dir, ".cordon", kind, `${hash(specifier)}.js`);
  const local = {
    sourceImports: new Set(Object.keys(sourceImports)),
    hostModules: new Set(Object.keys(hostSources)),
    fileUrl: (kind: "i" | "h", specifier: string) => pathToFileURL(pathFor(kind, specifier)).href,
    run,
  };
  const write = async (path: string, code: string) => {
    const specifiers = await importSpecifiers(code, bound);
    const map = new Map(specifiers.map((s) => [s, rewriteSpecifier(s, local)]));
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, await replaceSpecifiers(code, map));
  };
  for (const [specifier, code] of Object.entries(hostSources)) {
    const path = pathFor("h", specifier);
    names.set(path, specifier);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, code);
  }
  for (const [specifier, text] of Object.entries(sourceImports)) {
    const normalized = await normalizeSource(text, specifier, bound);
    const path = isRelative(specifier) ? join(dir, specifier) : pathFor("i", specifier);
    if (relative(dir, path).startsWith("..")) continue;
    names.set(path, specifier);
    lineMaps.set(specifier, normalized.lineMap);
    await write(path, normalized.code);
  }
  const entry = join(dir, `entry-${hash(source.code)}.js`);
  names.set(entry, source.filename);
  lineMaps.set(source.filename, source.lineMap);
  await write(entry, source.code);
  return { url: `${pathToFileURL(entry).href}${run}`, names, lineMaps };
}

/** Check and normalize a multi-file source's paths: relative, inside the directory, within the caps. */
export function checkFiles(files: unknown): Record<string, string> {
  if (files === undefined) return {};
  if (files === null || typeof files !== "object" || Array.isArray(files)) {
    throw new TypeError("cordon: files must be an object of relative path → module source text");
  }
  const out: Record<string, string> = {};
  let bytes = 0;
  const entries = Object.entries(files as Record<string, unknown>);
  if (entries.length > MAX_FILES) throw new TypeError(`cordon: files holds ${entries.length} files; at most ${MAX_FILES}`);
  for (const [path, text] of entries) {
    if (typeof text !== "string") throw new TypeError(`cordon: files[${JSON.stringify(path)}] must be source text`);
    const clean = path.replace(/^\.\//, "");
    if (!clean || clean.startsWith("/") || clean.split(/[\\/]/).some((part) => part === ".." || part === "" || part === ".")) {
      throw new TypeError(`cordon: files[${JSON.stringify(path)}] must be a relative path inside the function (no "..")`);
    }
    if (clean.split(sep)[0] === ".cordon") throw new TypeError('cordon: files may not use the ".cordon" directory');
    bytes += Buffer.byteLength(text);
    out[`./${clean}`] = text;
  }
  if (bytes > MAX_FILES_BYTES) throw new TypeError(`cordon: files hold ${bytes} bytes; at most ${MAX_FILES_BYTES}`);
  return out;
}
