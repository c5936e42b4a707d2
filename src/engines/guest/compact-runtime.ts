/**
 * The guest runtime's script minified, for QuickJS: it compiles a script whole, every function
 * body, on every instance (V8 compiles lazily and reuses its code cache). Compiling is nearly all
 * of a QuickJS instance's start: measured here, the 113 KB script took 16–18 ms per instance and
 * the 44 KB minified one 9–10 ms. `keepNames` keeps the names guest code can read (`fetch.name`,
 * `URL.name`); the filename stack traces are stripped by stays the same.
 *
 * The build minifies it once (scripts/build-guest-runtime.mjs writes PREBUILT next to the compiled
 * module), so a process starting its first QuickJS instance neither waits for esbuild (~160 ms
 * here, its service process started first) nor spawns it. Where that file is missing or was made
 * from another script (tests run the TypeScript sources, whose functions print differently), the
 * script is minified here, as before.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { withEsbuild } from "../../core/esbuild-calls.js";
import { guestRuntimeScript } from "./bundle.js";

/** esbuild's transform options: the same at build time and here. */
const COMPACT_TRANSFORM = { loader: "js", minify: true, keepNames: true, logLevel: "silent" } as const;

/** The build's minified runtime, beside this module in dist/. */
const PREBUILT = new URL("./guest-runtime.min.json", import.meta.url);

/** What the build writes: the minified script, and a digest of the script it was made from. */
interface Prebuilt {
  sourceSha256: string;
  code: string;
}

let compact: Promise<string> | undefined;

export function compactGuestRuntimeScript(): Promise<string> {
  if (!compact) {
    const source = guestRuntimeScript();
    const prebuilt = readPrebuilt(PREBUILT, source);
    const made =
      prebuilt !== undefined
        ? Promise.resolve(prebuilt)
        : withEsbuild({ kind: "transform", code: source, options: COMPACT_TRANSFORM }).then((out) => enclosed(out.code));
    compact = made;
    // A failure is not kept: the next instance tries again.
    made.catch(() => {
      if (compact === made) compact = undefined;
    });
  }
  return compact;
}

/** The minified runtime in `file` when it was made from exactly `source`; undefined otherwise. */
export function readPrebuilt(file: URL | string, source: string): string | undefined {
  let saved: Partial<Prebuilt> | null;
  try {
    saved = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
  if (typeof saved?.code !== "string" || saved.sourceSha256 !== sha256(source)) return undefined;
  return saved.code;
}

/**
 * For the build: minify this process's runtime script with esbuild's own `transform` (the build
 * has no use for the bounded service) and write it where `compactGuestRuntimeScript` looks.
 */
export async function writePrebuilt(
  transform: (code: string, options: typeof COMPACT_TRANSFORM) => Promise<{ code: string }>,
  file: URL | string = PREBUILT,
): Promise<void> {
  const source = guestRuntimeScript();
  const out = await transform(source, COMPACT_TRANSFORM);
  const prebuilt: Prebuilt = { sourceSha256: sha256(source), code: enclosed(out.code) };
  writeFileSync(file, JSON.stringify(prebuilt));
}

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/**
 * esbuild puts its `keepNames` helpers (`var a=Object.defineProperty;var b=(f,n)=>a(f,"name",…)`)
 * before the runtime's function, at the script's top level, where they became writable guest
 * globals the runtime then called: a guest that replaced one received the encoder's inner
 * functions. They go inside a function of their own, which returns what the runtime returns.
 */
function enclosed(code: string): string {
  const start = code.indexOf('(function(){"use strict";');
  if (start < 0) throw new Error("cordon: the minified guest runtime has an unexpected shape");
  const helpers = code.slice(0, start);
  const runtime = code.slice(start).trimEnd().replace(/;$/, "");
  return `(function(){${helpers}return ${runtime}})()`;
}
