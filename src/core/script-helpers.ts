/**
 * esbuild writes its module helpers (`__defProp`, `__export`, `__toCommonJS`, …) at the top of
 * every IIFE it emits: about 900 characters that QuickJS compiles again for every one-off run
 * (measured: 130–200 µs of a ~1.1 ms run, against 10–16 µs for the same module without them).
 * The guest runtime defines the same helpers once per instance (runtime.ts, `helpers`), and the
 * script form takes them as its parameter instead.
 *
 * Only text that is exactly what esbuild (pinned in package.json) prints is replaced, line for
 * line, so source maps stay valid; anything else stays as esbuild wrote it. A test pins that a
 * plain module takes the shared helpers, so an esbuild upgrade that changes them shows.
 */
import { randomBytes } from "node:crypto";

/**
 * The script form's two names of cordon's own, which share the scope of the guest's top-level
 * code: with fixed names a guest could read them (`typeof __cordon_helpers` was "object" in this
 * form and "undefined" in the module form) and a guest's own `const __cordon_helpers` broke its
 * module ("Cannot access before initialization"). A suffix drawn once per process makes them
 * unguessable; the names live only in the code made in this process.
 */
const SUFFIX = randomBytes(8).toString("hex");
export const HELPERS_PARAM = `__cordon_helpers_${SUFFIX}`;
export const EXPORTS_NAME = `__cordon_exports_${SUFFIX}`;

/** esbuild's helpers in the order it prints them, each as it prints it inside the IIFE. */
const ESBUILD_HELPERS: [name: string, text: string][] = [
  ["__defProp", "  var __defProp = Object.defineProperty;\n"],
  ["__getOwnPropDesc", "  var __getOwnPropDesc = Object.getOwnPropertyDescriptor;\n"],
  ["__getOwnPropNames", "  var __getOwnPropNames = Object.getOwnPropertyNames;\n"],
  ["__hasOwnProp", "  var __hasOwnProp = Object.prototype.hasOwnProperty;\n"],
  [
    "__export",
    "  var __export = (target, all) => {\n    for (var name in all)\n      __defProp(target, name, { get: all[name], enumerable: true });\n  };\n",
  ],
  [
    "__copyProps",
    '  var __copyProps = (to, from, except, desc) => {\n    if (from && typeof from === "object" || typeof from === "function") {\n      for (let key of __getOwnPropNames(from))\n        if (!__hasOwnProp.call(to, key) && key !== except)\n          __defProp(to, key, { get: () => from[key], enumerable: !(desc = __getOwnPropDesc(from, key)) || desc.enumerable });\n    }\n    return to;\n  };\n',
  ],
  ["__toCommonJS", '  var __toCommonJS = (mod) => __copyProps(__defProp({}, "__esModule", { value: true }), mod);\n'],
];

const IIFE_HEAD = `var ${EXPORTS_NAME} = (() => {\n`;
const IIFE_TAIL = "})();\n";

/**
 * The script form's function: an arrow that takes the helpers (HELPERS_PARAM) and returns the
 * module's exports. Its body is esbuild's IIFE's own, the IIFE's first and last lines emptied
 * (every other line keeps its number: the wrapper adds one, which the line map already has).
 *
 * An arrow evaluated at the global scope, because a module's top level has no `arguments`: in
 * a `function` wrapper `arguments` was the wrapper's (`typeof arguments` "object", and
 * `arguments[0]` the runtime's helpers), where the module form says "undefined". Top-level
 * `this` is esbuild's to replace (it writes `void 0`); only a direct `eval("this")` there reads
 * the global object, where a module reads undefined. And one function fewer: QuickJS compiled
 * the IIFE as a function of its own on every one-off run (measured: 34–50 → 24–27 µs an
 * evaluation of a one-line module, warm).
 */
export function scriptFactory(iife: string): string {
  const head = `((${HELPERS_PARAM}) => {"use strict";\n`;
  const shared = shareHelpers(iife);
  if (shared.startsWith(IIFE_HEAD) && shared.endsWith(IIFE_TAIL)) {
    return `${head}\n${shared.slice(IIFE_HEAD.length, -IIFE_TAIL.length)}})`;
  }
  // Not the shape this esbuild prints: its IIFE runs as written.
  return `${head}${shared}\nreturn ${EXPORTS_NAME};\n})`;
}

/**
 * esbuild's IIFE with its leading helpers taken from HELPERS_PARAM instead of defined: the
 * same number of lines, the helpers' lines left empty. Unchanged when nothing matches.
 */
export function shareHelpers(iife: string): string {
  if (!iife.startsWith(IIFE_HEAD)) return iife;
  let rest = iife.slice(IIFE_HEAD.length);
  const taken: string[] = [];
  let lines = 0;
  for (const [name, text] of ESBUILD_HELPERS) {
    if (!rest.startsWith(text)) continue;
    taken.push(name);
    lines += text.split("\n").length - 1;
    rest = rest.slice(text.length);
  }
  if (taken.length === 0) return iife;
  // Only the helpers the module uses (most use two): every name is parsed again on every one-off
  // run, and QuickJS compiles on a cold cache (measured: 618 → 361 characters, 166 → 148 µs).
  const used = taken.filter((name) => new RegExp(`\\b${name}\\b`).test(rest));
  if (used.length === 0) return `${IIFE_HEAD}${"\n".repeat(lines)}${rest}`;
  const declaration = `  var ${used.map((name) => `${name} = ${HELPERS_PARAM}.${name}`).join(", ")};\n`;
  return `${IIFE_HEAD}${declaration}${"\n".repeat(lines - 1)}${rest}`;
}
