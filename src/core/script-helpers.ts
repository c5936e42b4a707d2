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
