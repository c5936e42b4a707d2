/**
 * The per-run reset of a function's Deno process, and the check that decides whether the process
 * may serve another run at all.
 *
 * SELF-CONTAINED: stringified into the bootstrap script like the other parts (script.ts), and
 * called before any guest code, so every builtin it uses is the original. Once guest code has run,
 * it calls nothing a guest can replace: no `for…of`, no destructuring, no method looked up on a
 * prototype, no descriptor object whose missing fields would be read from Object.prototype.
 *
 * Restoring every builtin a guest may change is not attempted: a process whose builtins changed
 * is reported dirty, and the host retires it (a replaced Map.prototype.has kept a run's globals
 * for the next; a replaced Uint8Array.prototype.subarray read the next run's input and secrets).
 */

export interface GlobalReset {
  /** Records the globals and the builtins (and `roots`) as the next runs must find them. */
  snapshot(roots: readonly unknown[], isProxy: (value: unknown) => boolean): void;
  /** Back to the snapshot's globals; false when something of the guest's could not be undone. */
  reset(): boolean;
  /** True when every watched builtin is as the snapshot found it. */
  builtinsIntact(): boolean;
}

// biome-ignore lint/suspicious/noExplicitAny: the realm's builtins, untyped.
type Any = any;

export function createReset(global: object): GlobalReset {
  const callOf = Function.prototype.call;
  const uncurry = (fn: Any) => callOf.bind(fn) as Any;
  const ownKeys = Reflect.ownKeys;
  const getOwnDesc = Reflect.getOwnPropertyDescriptor;
  const defineProperty = Reflect.defineProperty;
  const deleteProperty = Reflect.deleteProperty;
  const getPrototypeOf = Reflect.getPrototypeOf;
  const isExtensible = Reflect.isExtensible;
  const hasOwn = Object.hasOwn;
  const objectIs = Object.is;
  const MapCtor = Map;
  const mapHas = uncurry(Map.prototype.has) as (map: Map<unknown, unknown>, key: unknown) => boolean;
  const mapSet = uncurry(Map.prototype.set) as (map: Map<unknown, unknown>, key: unknown, value: unknown) => void;
  const regexpExec = uncurry(RegExp.prototype.exec) as (re: RegExp, text: string) => unknown;
  const emptyPattern = /(?:)/;

  /** A descriptor as plain fields on a null-prototype object: no field is read from Object.prototype. */
  interface Desc {
    value: unknown;
    get: unknown;
    set: unknown;
    flags: number;
  }
  function describe(target: object, key: PropertyKey): Desc | undefined {
    const d = getOwnDesc(target, key) as Any;
    if (d === undefined) return undefined;
    // Only the fields the descriptor has are read: an absent `get` would be Object.prototype's.
    const desc = { __proto__: null } as Any as Desc;
    if (hasOwn(d, "get")) {
      desc.get = d.get;
      desc.set = d.set;
      desc.flags = 8;
    } else {
      desc.value = d.value;
      desc.flags = d.writable ? 1 : 0;
    }
    desc.flags |= (d.enumerable ? 2 : 0) | (d.configurable ? 4 : 0);
    return desc;
  }
  /** Whether `target[key]` is described as `was` (compared field by field: no object made). */
  function unchanged(target: object, key: PropertyKey, was: Desc): boolean {
    const d = getOwnDesc(target, key) as Any;
    if (d === undefined) return false;
    const flags = (d.enumerable ? 2 : 0) | (d.configurable ? 4 : 0);
    if (hasOwn(d, "get")) return was.flags === (flags | 8) && d.get === was.get && d.set === was.set;
    return was.flags === (flags | (d.writable ? 1 : 0)) && objectIs(d.value, was.value);
  }
  function toDescriptor(d: Desc): PropertyDescriptor {
    const out = { __proto__: null, enumerable: (d.flags & 2) !== 0, configurable: (d.flags & 4) !== 0 } as Any;
    if (d.flags & 8) {
      out.get = d.get;
      out.set = d.set;
    } else {
      out.value = d.value;
      out.writable = (d.flags & 1) !== 0;
    }
    return out;
  }

  // The globals, as parallel arrays and a map of their keys.
  let globalKeys: PropertyKey[] = [];
  let globalDescs: Desc[] = [];
  let isBaseline = new MapCtor<PropertyKey, boolean>();
  // Every builtin object reachable from them: its prototype, whether it is extensible, its own properties.
  let watched: object[] = [];
  let watchedProtos: unknown[] = [];
  let watchedExtensible: boolean[] = [];
  let watchedKeys: PropertyKey[][] = [];
  let watchedDescs: Desc[][] = [];

  function isObject(value: unknown): value is object {
    return (typeof value === "object" && value !== null) || typeof value === "function";
  }

  /**
   * The builtins watched: the language's own (what a polluted or replaced prototype changes for
   * every later run, the bootstrap's and runtime's reads included), the few web ones the runtime
   * builds on, and the global object's prototypes. Each with its prototype object and its own
   * [[Prototype]]. Not every object a guest can reach: checking all of Deno's (~1,500) took 12 ms.
   */
  const WATCHED_GLOBALS = [
    "Object",
    "Function",
    "Array",
    "String",
    "Number",
    "Boolean",
    "Symbol",
    "BigInt",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "WeakRef",
    "FinalizationRegistry",
    "Promise",
    "RegExp",
    "Date",
    "Error",
    "TypeError",
    "RangeError",
    "SyntaxError",
    "ReferenceError",
    "EvalError",
    "URIError",
    "AggregateError",
    "ArrayBuffer",
    "DataView",
    "Uint8Array",
    "JSON",
    "Math",
    "Reflect",
    "Iterator",
    "TextEncoder",
    "TextDecoder",
    "EventTarget",
    "Event",
    "AbortController",
    "AbortSignal",
    "Headers",
    "Request",
    "Response",
    "URL",
    "console",
  ];

  function watch(target: unknown, seen: Map<object, boolean>, isProxy: (value: unknown) => boolean): void {
    if (!isObject(target) || mapHas(seen, target)) return;
    mapSet(seen, target, true);
    // A proxy's traps are its own code (the bootstrap's guarded constructors): its target is watched.
    if (isProxy(target)) return;
    const keys = ownKeys(target);
    const descs: Desc[] = [];
    for (let k = 0; k < keys.length; k++) descs[k] = describe(target, keys[k]) as Desc;
    const at = watched.length;
    watched[at] = target;
    watchedProtos[at] = getPrototypeOf(target);
    watchedExtensible[at] = isExtensible(target);
    watchedKeys[at] = keys;
    watchedDescs[at] = descs;
  }

  function snapshot(roots: readonly unknown[], isProxy: (value: unknown) => boolean): void {
    globalKeys = [];
    globalDescs = [];
    isBaseline = new MapCtor();
    const keys = ownKeys(global);
    for (let i = 0; i < keys.length; i++) {
      const desc = describe(global, keys[i]);
      if (desc === undefined) continue;
      globalKeys[globalKeys.length] = keys[i];
      globalDescs[globalDescs.length] = desc;
      mapSet(isBaseline, keys[i], true);
    }
    watched = [];
    watchedProtos = [];
    watchedExtensible = [];
    watchedKeys = [];
    watchedDescs = [];
    const seen = new MapCtor<object, boolean>();
    const all: unknown[] = [];
    for (let i = 0; i < roots.length; i++) all[all.length] = roots[i];
    for (let i = 0; i < WATCHED_GLOBALS.length; i++) all[all.length] = (getOwnDesc(global, WATCHED_GLOBALS[i]) as Any)?.value;
    // The intrinsics no global names: iterator, generator and async function prototypes, %TypedArray%.
    const iterators = [
      [][Symbol.iterator](),
      new Map()[Symbol.iterator](),
      new Set()[Symbol.iterator](),
      ""[Symbol.iterator](),
      /a/[Symbol.matchAll](""),
    ];
    for (let i = 0; i < iterators.length; i++) all[all.length] = getPrototypeOf(iterators[i]);
    const functions = [function* () {}, async () => {}, async function* () {}, Uint8Array];
    for (let i = 0; i < functions.length; i++) all[all.length] = getPrototypeOf(functions[i]);
    for (let p = getPrototypeOf(global); p !== null; p = getPrototypeOf(p as object)) all[all.length] = p;
    for (let i = 0; i < all.length; i++) {
      const target = all[i];
      if (!isObject(target)) continue;
      watch(target, seen, isProxy);
      const prototype = (getOwnDesc(target, "prototype") as Any)?.value;
      watch(prototype, seen, isProxy);
      if (isObject(prototype)) watch(getPrototypeOf(prototype), seen, isProxy);
      watch(getPrototypeOf(target), seen, isProxy);
    }
  }

  /** True when every watched builtin is as the snapshot found it. */
  function builtinsIntact(): boolean {
    for (let i = 0; i < watched.length; i++) {
      const target = watched[i];
      if (getPrototypeOf(target) !== watchedProtos[i] || isExtensible(target) !== watchedExtensible[i]) return false;
      const keys = watchedKeys[i];
      const descs = watchedDescs[i];
      if (ownKeys(target).length !== keys.length) return false;
      for (let k = 0; k < keys.length; k++) if (!unchanged(target, keys[k], descs[k])) return false;
    }
    return true;
  }

  function reset(): boolean {
    let clean = true;
    const keys = ownKeys(global);
    for (let i = 0; i < keys.length; i++) {
      if (!mapHas(isBaseline, keys[i]) && !deleteProperty(global, keys[i])) clean = false;
    }
    for (let i = 0; i < globalKeys.length; i++) {
      if (unchanged(global, globalKeys[i], globalDescs[i])) continue;
      if (!defineProperty(global, globalKeys[i], toDescriptor(globalDescs[i]))) clean = false;
    }
    // RegExp.input, lastMatch and $1…$9 hold what the last match read: match the empty string.
    regexpExec(emptyPattern, "");
    return clean;
  }

  return { snapshot, reset, builtinsIntact };
}
