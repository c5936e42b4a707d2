/**
 * Formats console arguments into one line of text, like a small `util.format`: a first string
 * argument's `%s %d %i %f %j %o %O %c %%` take the arguments that follow, as in Node and Deno.
 *
 * SELF-CONTAINED: injected into the guest realm with `toString()`, so formatting (and any
 * getter or Proxy trap it touches) runs inside the guest, under the guest's limits.
 */
export type FormatLogArgs = (args: unknown[], maxChars: number) => string;

export function createInspect(): FormatLogArgs {
  const ObjectProto = Object.prototype;
  const getProto = Object.getPrototypeOf;
  const setPrototypeOf = Object.setPrototypeOf;
  const ownKeys = Object.keys;
  const isArray = Array.isArray;
  const isView = ArrayBuffer.isView;
  const StringCtor = String;
  const TypeErrorCtor = TypeError;
  const stringify = JSON.stringify;
  const NumberIsNaN = Number.isNaN;
  const mathMin = Math.min;
  // Captured before any guest code, and called through functions bound now: a guest that
  // replaces a builtin changes its own values, not how the console prints them. (With
  // String.prototype.slice replaced, a 50 MB string crossed whole to the host on every log call;
  // with the array iterator replaced, the line came back as an object whose `length` said 0.)
  const callOf = Function.prototype.call;
  const uncurry = <A extends unknown[], R>(method: (...args: A) => R) =>
    callOf.bind(method) as unknown as (self: unknown, ...args: A) => R;
  const sliceOf = uncurry(String.prototype.slice) as (text: string, start: number, end?: number) => string;
  const charCodeOf = uncurry(String.prototype.charCodeAt) as (text: string, index: number) => number;
  const indexOfIn = uncurry(String.prototype.indexOf) as (text: string, search: string) => number;
  const startsWith = uncurry(String.prototype.startsWith) as (text: string, search: string) => boolean;
  const symbolText = uncurry(Symbol.prototype.toString) as (symbol: symbol) => string;
  const regExpText = uncurry(RegExp.prototype.toString) as (re: RegExp) => string;
  const regExpExec = uncurry(RegExp.prototype.exec) as (re: RegExp, text: string) => unknown;
  const dateGetTime = uncurry(Date.prototype.getTime) as (date: Date) => number;
  const dateIso = uncurry(Date.prototype.toISOString) as (date: Date) => string;
  const hasOwn = uncurry(ObjectProto.hasOwnProperty) as (o: object, key: number | string) => boolean;
  const getOwnDesc = Object.getOwnPropertyDescriptor;
  // instanceof asks Symbol.hasInstance, the guest's to define: the chain is walked instead.
  const inherits = uncurry(ObjectProto.isPrototypeOf) as (proto: object, value: unknown) => boolean;
  const getterOf = (proto: object, name: string | symbol) =>
    uncurry((Object.getOwnPropertyDescriptor(proto, name) as PropertyDescriptor).get as () => unknown);
  const TypedArrayProto = getProto(Uint8Array.prototype);
  const typedTag = getterOf(TypedArrayProto, Symbol.toStringTag) as (view: unknown) => string | undefined;
  const typedLength = getterOf(TypedArrayProto, "length") as (view: unknown) => number;
  const mapSize = getterOf(Map.prototype, "size") as (map: unknown) => number;
  const setSize = getterOf(Set.prototype, "size") as (set: unknown) => number;
  // Iterated by the iterators' own `next`, read now: the guest's `next` (or destructuring, which
  // runs the array iterator) would print entries the Map does not hold.
  const mapEntries = uncurry(Map.prototype.entries) as (map: unknown) => object;
  const mapNext = uncurry(getProto(new Map().entries()).next) as (it: object) => IteratorResult<[unknown, unknown]>;
  const setValues = uncurry(Set.prototype.values) as (set: unknown) => object;
  const setNext = uncurry(getProto(new Set().values()).next) as (it: object) => IteratorResult<unknown>;
  const ErrorProto = Error.prototype;
  const DateProto = Date.prototype;
  const RegExpProto = RegExp.prototype;
  const MapProto = Map.prototype;
  const SetProto = Set.prototype;
  const NumberCtor = Number;
  const parseIntFn = parseInt;
  const parseFloatFn = parseFloat;
  // toString methods %s treats as "not the object's own": such objects are inspected, as Node does.
  const builtinToStrings = [
    Object.prototype.toString,
    Array.prototype.toString,
    Error.prototype.toString,
    Date.prototype.toString,
    RegExp.prototype.toString,
    Function.prototype.toString,
  ];
  const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
  const MAX_ITEMS = 100;
  /** Containers nested deeper print as `[Object]` / `[Array]`: Node's default depth (2) is 3 here. */
  const MAX_DEPTH = 3;
  /**
   * Characters the line may still take. Leaves spend it and containers stop expanding once it is
   * gone: a structure that shares subtrees is small to build and huge to print (100×100×100
   * references made ~100 MB of text, which failed the run where the log should be cut).
   */
  let left = 0;

  /** A list no prototype reaches: an index setter a guest put on Array.prototype never sees its writes. */
  const list = (): unknown[] => setPrototypeOf([], null) as unknown[];

  /** `items` joined by ", ": Array.prototype.join is the guest's to replace. */
  function joined(items: unknown[], count: number): string {
    let out = "";
    for (let i = 0; i < count; i++) out += i === 0 ? items[i] : ", " + items[i];
    return out;
  }

  /** What a template literal makes of `value`: String() but for a Symbol, which it refuses. */
  function text(value: unknown): string {
    if (typeof value === "symbol") throw new TypeErrorCtor("Cannot convert a Symbol value to a string");
    return StringCtor(value);
  }

  function inspect(value: unknown, depth: number, seen: unknown[]): string {
    const before = left;
    const out = describe(value, depth, seen);
    // A container's text holds its children's, which they spent already: it spends the rest.
    left -= out.length - (before - left);
    return out;
  }

  function describe(value: unknown, depth: number, seen: unknown[]): string {
    if (left <= 0) return "…";
    switch (typeof value) {
      case "string":
        if (value.length > left) {
          // Never between the halves of a surrogate pair.
          const code = charCodeOf(value, left - 1);
          const cut = sliceOf(value, 0, code >= 0xd800 && code <= 0xdbff ? left - 1 : left);
          return depth === 0 ? cut : stringify(cut) + "…";
        }
        return depth === 0 ? value : stringify(value);
      case "number":
        return value === 0 && 1 / value < 0 ? "-0" : StringCtor(value);
      case "bigint":
        return StringCtor(value) + "n";
      case "boolean":
      case "undefined":
        return StringCtor(value);
      case "symbol":
        return symbolText(value);
      case "function":
        return "[Function: " + text(value.name || "(anonymous)") + "]";
    }
    if (value === null) return "null";
    for (let i = 0; i < seen.length; i++) if (seen[i] === value) return "[Circular]";
    if (inherits(ErrorProto, value)) {
      const error = value as Error;
      const header = text(error.name) + ": " + text(error.message);
      const stack = typeof error.stack === "string" ? error.stack : "";
      // V8 stacks start with the header; QuickJS stacks are frames only.
      if (!stack) return header;
      if (startsWith(stack, error.name)) return stack;
      const end = stack.length - 1;
      return header + "\n" + (charCodeOf(stack, end) === 10 ? sliceOf(stack, 0, end) : stack);
    }
    if (inherits(DateProto, value)) {
      const date = value as Date;
      return NumberIsNaN(dateGetTime(date)) ? "Invalid Date" : dateIso(date);
    }
    if (inherits(RegExpProto, value)) return regExpText(value as RegExp);
    if (depth >= MAX_DEPTH) {
      // Empty ones print whole, as in Node. (A Proxy's traps may throw here: it is an object.)
      try {
        if (isArray(value)) return (value as unknown[]).length === 0 ? "[]" : "[Array]";
        return getProto(value) === ObjectProto && ownKeys(value as object).length === 0 ? "{}" : "[Object]";
      } catch {
        return "[Object]";
      }
    }
    const at = seen.length;
    seen[at] = value;
    try {
      return container(value as object, depth, seen);
    } catch {
      return "[Uninspectable]";
    } finally {
      seen.length = at;
    }
  }

  /**
   * An own property's text: an accessor is named, not called, as Node does (a log line runs no
   * getter: one that logged `this` recursed until the stack overflowed, hundreds of lines).
   */
  function property(value: object, key: string | number, depth: number, seen: unknown[]): string {
    const desc = getOwnDesc(value, key);
    if (desc !== undefined && (hasOwn(desc, "get") || hasOwn(desc, "set"))) {
      const getter = desc.get !== undefined;
      return getter && desc.set !== undefined ? "[Getter/Setter]" : getter ? "[Getter]" : "[Setter]";
    }
    return inspect(desc === undefined ? undefined : desc.value, depth + 1, seen);
  }

  /** An array, Map, Set, typed array or object, its items inspected one level deeper. */
  function container(value: object, depth: number, seen: unknown[]): string {
    const items = list();
    let n = 0;
    if (isArray(value)) {
      const length = (value as unknown[]).length;
      const shown = mathMin(length, MAX_ITEMS);
      // A hole prints as nothing between its commas.
      for (let i = 0; i < shown; i++) items[n++] = hasOwn(value, i) ? property(value, i, depth, seen) : "";
      if (length > MAX_ITEMS) items[n++] = "... " + (length - MAX_ITEMS) + " more items";
      return "[ " + joined(items, n) + " ]";
    }
    if (inherits(MapProto, value)) {
      const entries = mapEntries(value);
      for (let step = mapNext(entries); !step.done && n < MAX_ITEMS; step = mapNext(entries)) {
        const entry = step.value;
        items[n++] = inspect(entry[0], depth + 1, seen) + " => " + inspect(entry[1], depth + 1, seen);
      }
      return "Map(" + mapSize(value) + ") { " + joined(items, n) + " }";
    }
    if (inherits(SetProto, value)) {
      const values = setValues(value);
      for (let step = setNext(values); !step.done && n < MAX_ITEMS; step = setNext(values))
        items[n++] = inspect(step.value, depth + 1, seen);
      return "Set(" + setSize(value) + ") { " + joined(items, n) + " }";
    }
    if (isView(value)) {
      // A DataView has no length and no items to show.
      const length = typedTag(value) === undefined ? undefined : typedLength(value);
      const name = getProto(value)?.constructor?.name ?? "TypedArray";
      const shown = length === undefined ? 0 : mathMin(length, MAX_ITEMS);
      for (let i = 0; i < shown; i++) items[n++] = inspect((value as unknown as ArrayLike<unknown>)[i], depth + 1, seen);
      return text(name) + "(" + length + ") [ " + joined(items, n) + " ]";
    }
    const proto = getProto(value);
    const prefix = proto === ObjectProto || proto === null ? "" : text(proto?.constructor?.name ?? "Object") + " ";
    const keys = ownKeys(value);
    const shown = mathMin(keys.length, MAX_ITEMS);
    for (let i = 0; i < shown; i++) {
      const key = keys[i];
      const name = regExpExec(IDENT, key) !== null ? key : stringify(key);
      items[n++] = name + ": " + property(value, key, depth, seen);
    }
    if (keys.length > MAX_ITEMS) items[n++] = "... " + (keys.length - MAX_ITEMS) + " more keys";
    return n ? prefix + "{ " + joined(items, n) + " }" : prefix + "{}";
  }

  /** A number as Node's format prints one: -0 keeps its sign. */
  function numberText(n: number): string {
    return n === 0 && 1 / n < 0 ? "-0" : StringCtor(n);
  }

  /** The text one specifier (`code`, after a %) makes of `arg`. */
  function specifier(code: number, arg: unknown): string {
    switch (code) {
      case 0x73: {
        // %s
        if (typeof arg === "bigint") return StringCtor(arg) + "n";
        if (typeof arg === "number") return numberText(arg);
        if (typeof arg === "symbol") return symbolText(arg);
        if (arg === null || (typeof arg !== "object" && typeof arg !== "function")) return StringCtor(arg);
        const own = (arg as { toString?: unknown }).toString;
        let builtin = typeof own !== "function";
        for (let i = 0; i < builtinToStrings.length && !builtin; i++) builtin = own === builtinToStrings[i];
        // Node prints such an object one level deep.
        return builtin ? inspect(arg, MAX_DEPTH - 1, list()) : StringCtor(arg);
      }
      case 0x64: // %d
        if (typeof arg === "bigint") return StringCtor(arg) + "n";
        return typeof arg === "symbol" ? "NaN" : numberText(NumberCtor(arg));
      case 0x69: // %i
        if (typeof arg === "bigint") return StringCtor(arg) + "n";
        return typeof arg === "symbol" ? "NaN" : numberText(parseIntFn(arg as string));
      case 0x66: // %f
        return typeof arg === "symbol" ? "NaN" : numberText(parseFloatFn(arg as string));
      case 0x6a: // %j
        try {
          return StringCtor(stringify(arg));
        } catch {
          return "[Circular]";
        }
      case 0x6f: // %o
      case 0x4f: // %O: a string is shown quoted, as inside an object
        return inspect(arg, typeof arg === "string" ? 1 : 0, list());
      default: // %c: styles, which a line of text has none of
        return "";
    }
  }

  /** How many arguments the latest substitute took (the format string included). */
  let lastUsed = 1;

  /**
   * The format string with its specifiers replaced; how many arguments they took is left in
   * `lastUsed`, as it returns (a pair returned as an array was destructured with the guest's
   * array iterator, which could hand back a line whose `length` said 0).
   */
  function substitute(format: string, args: unknown[]): string {
    let out = "";
    let used = 1;
    let last = 0;
    const n = format.length;
    for (let i = 0; i < n - 1 && left > 0; i++) {
      if (charCodeOf(format, i) !== 0x25) continue;
      const code = charCodeOf(format, i + 1);
      let piece: string;
      if (code === 0x25) piece = "%";
      else if (used >= args.length) continue;
      else if (
        code === 0x73 ||
        code === 0x64 ||
        code === 0x69 ||
        code === 0x66 ||
        code === 0x6a ||
        code === 0x6f ||
        code === 0x4f ||
        code === 0x63
      ) {
        // What inspect spends while making the piece is counted once, below, with the piece.
        const budget = left;
        try {
          piece = specifier(code, args[used]);
        } catch {
          piece = "[Uninspectable]";
        }
        left = budget;
        used++;
      } else continue;
      const before = sliceOf(format, last, i);
      left -= before.length + piece.length;
      out += before + piece;
      last = i + 2;
      i++;
    }
    lastUsed = used;
    return out + sliceOf(format, last, n);
  }

  return function formatLogArgs(args, maxChars) {
    let out = "";
    left = maxChars;
    let start = 0;
    const first = args[0];
    if (args.length > 1 && typeof first === "string" && indexOfIn(first, "%") >= 0) {
      const substituted = substitute(first, args);
      if (substituted.length > maxChars) return sliceOf(substituted, 0, maxChars);
      out = substituted;
      left = maxChars - substituted.length;
      start = lastUsed;
    }
    for (let i = start; i < args.length; i++) {
      let part: string;
      try {
        part = inspect(args[i], 0, list());
      } catch {
        part = "[Uninspectable]";
      }
      out += i === 0 ? part : " " + part;
      if (out.length > maxChars) return sliceOf(out, 0, maxChars);
    }
    return out;
  };
}
