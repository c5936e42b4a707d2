/**
 * `cordon/names`: name rules shared by the library, the service and a platform's UI.
 * This entry must stay free of native modules (and of anything that loads them): a browser
 * bundle or a config validator imports it without isolated-vm.
 */

/** JavaScript reserved words: never usable as a global or export binding. */
export const RESERVED_WORDS: ReadonlySet<string> = new Set([
  "await",
  "break",
  "case",
  "catch",
  "class",
  "const",
  "continue",
  "debugger",
  "default",
  "delete",
  "do",
  "else",
  "enum",
  "export",
  "extends",
  "false",
  "finally",
  "for",
  "function",
  "if",
  "implements",
  "import",
  "in",
  "instanceof",
  "interface",
  "let",
  "new",
  "null",
  "package",
  "private",
  "protected",
  "public",
  "return",
  "static",
  "super",
  "switch",
  "this",
  "throw",
  "true",
  "try",
  "typeof",
  "var",
  "void",
  "while",
  "with",
  "yield",
  "arguments",
  "eval",
  "undefined",
  "NaN",
  "Infinity",
]);

/** Globals the guest runtime itself provides; a host global may not shadow them. */
export const RUNTIME_GLOBALS: ReadonlySet<string> = new Set([
  "globalThis",
  "console",
  "setTimeout",
  "clearTimeout",
  "setInterval",
  "clearInterval",
  "queueMicrotask",
  "structuredClone",
  "URL",
  "URLSearchParams",
  "TextEncoder",
  "TextDecoder",
  "atob",
  "btoa",
  "crypto",
  "fetch",
  "Request",
  "Response",
  "Headers",
  "AbortController",
  "AbortSignal",
]);

/** ECMAScript intrinsics: replacing one for the guest would break the language it expects. */
export const INTRINSIC_GLOBALS: ReadonlySet<string> = new Set([
  "Object",
  "Function",
  "Array",
  "Number",
  "parseFloat",
  "parseInt",
  "Boolean",
  "String",
  "Symbol",
  "Date",
  "Promise",
  "RegExp",
  "Error",
  "AggregateError",
  "EvalError",
  "RangeError",
  "ReferenceError",
  "SyntaxError",
  "TypeError",
  "URIError",
  "JSON",
  "Math",
  "Intl",
  "ArrayBuffer",
  "Uint8Array",
  "Int8Array",
  "Uint16Array",
  "Int16Array",
  "Uint32Array",
  "Int32Array",
  "Float32Array",
  "Float64Array",
  "Uint8ClampedArray",
  "BigUint64Array",
  "BigInt64Array",
  "DataView",
  "Map",
  "BigInt",
  "Set",
  "WeakMap",
  "WeakSet",
  "Proxy",
  "Reflect",
  "FinalizationRegistry",
  "WeakRef",
  "decodeURI",
  "decodeURIComponent",
  "encodeURI",
  "encodeURIComponent",
  "escape",
  "unescape",
  "isFinite",
  "isNaN",
  "Atomics",
  "SharedArrayBuffer",
  "WebAssembly",
]);

/** Every name a host global may not take, in one set. */
export const RESERVED_GLOBAL_NAMES: ReadonlySet<string> = new Set([...RESERVED_WORDS, ...RUNTIME_GLOBALS, ...INTRINSIC_GLOBALS]);

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
/** Any identifier JavaScript accepts (`export const café`), as an export or property name: ASCII ones included. */
const ANY_IDENTIFIER = /^[\p{ID_Start}_$][\p{ID_Continue}$\u200C\u200D]*$/u;
const MAX_NAME_LENGTH = 128;

/** True when `name` can be a host global: an ASCII identifier that shadows nothing. */
export function isValidGlobalName(name: unknown): name is string {
  return (
    typeof name === "string" &&
    name.length <= MAX_NAME_LENGTH &&
    IDENTIFIER.test(name) &&
    !RESERVED_GLOBAL_NAMES.has(name) &&
    !name.startsWith("__cordon")
  );
}

/**
 * True when `name` can be a module export a caller names: `default` or an identifier, Unicode
 * ones included. (Host globals stay ASCII: isValidGlobalName.)
 */
export function isValidExportName(name: unknown): name is string {
  if (name === "default") return true;
  return typeof name === "string" && isIdentifierName(name) && !RESERVED_WORDS.has(name);
}

function isIdentifierName(part: string): boolean {
  return part.length <= MAX_NAME_LENGTH && ANY_IDENTIFIER.test(part);
}

/** True for a dotted call target such as `default.fetch` or `handlers.onEvent`. */
export function isValidExportPath(path: unknown): path is string {
  if (typeof path !== "string" || path.length > 512) return false;
  // Warm calls name the same few paths thousands of times a second: remember the valid ones.
  if (validPaths.has(path)) return true;
  const [head, ...rest] = path.split(".");
  const valid = isValidExportName(head) && rest.every(isIdentifierName);
  if (valid) {
    if (validPaths.size >= MAX_REMEMBERED_PATHS) validPaths.clear();
    validPaths.add(path);
  }
  return valid;
}

const validPaths = new Set<string>();
const MAX_REMEMBERED_PATHS = 1024;
