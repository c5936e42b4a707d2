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
  const ownKeys = Object.keys;
  const isArray = Array.isArray;
  const StringCtor = String;
  const stringify = JSON.stringify;
  // Captured before any guest code: the line's cap cuts with these. With String.prototype.slice
  // replaced, a 50 MB string crossed whole to the host on every log call.
  const callOf = Function.prototype.call;
  const sliceOf = callOf.bind(String.prototype.slice) as (text: string, start: number, end?: number) => string;
  const charCodeOf = callOf.bind(String.prototype.charCodeAt) as (text: string, index: number) => number;
  const itemsOf = callOf.bind(Array.prototype.slice) as <T>(list: ArrayLike<T>, start: number, end: number) => T[];
  const indexOfIn = callOf.bind(String.prototype.indexOf) as (text: string, search: string) => number;
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
  const MAX_DEPTH = 4;
  /**
   * Characters the line may still take. Leaves spend it and containers stop expanding once it is
   * gone: a structure that shares subtrees is small to build and huge to print (100×100×100
   * references made ~100 MB of text, which failed the run where the log should be cut).
   */
  let left = 0;

  function inspect(value: unknown, depth: number, seen: unknown[]): string {
    const before = left;
    const text = describe(value, depth, seen);
    // A container's text holds its children's, which they spent already: it spends the rest.
    left -= text.length - (before - left);
    return text;
  }

  function describe(value: unknown, depth: number, seen: unknown[]): string {
    if (left <= 0) return "…";
    switch (typeof value) {
      case "string":
        if (value.length > left) {
          // Never between the halves of a surrogate pair.
          const code = charCodeOf(value, left - 1);
          const cut = sliceOf(value, 0, code >= 0xd800 && code <= 0xdbff ? left - 1 : left);
          return depth === 0 ? cut : `${stringify(cut)}…`;
        }
        return depth === 0 ? value : stringify(value);
      case "number":
        return value === 0 && 1 / value < 0 ? "-0" : StringCtor(value);
      case "bigint":
        return `${value}n`;
      case "boolean":
      case "undefined":
        return StringCtor(value);
      case "symbol":
        return value.toString();
      case "function":
        return `[Function: ${value.name || "(anonymous)"}]`;
    }
    if (value === null) return "null";
    if (seen.includes(value)) return "[Circular]";
    if (value instanceof Error) {
      const header = `${value.name}: ${value.message}`;
      const stack = typeof value.stack === "string" ? value.stack : "";
      // V8 stacks start with the header; QuickJS stacks are frames only.
      if (!stack) return header;
      return stack.startsWith(value.name) ? stack : `${header}\n${stack.replace(/\n$/, "")}`;
    }
    if (value instanceof Date) return Number.isNaN(value.getTime()) ? "Invalid Date" : value.toISOString();
    if (value instanceof RegExp) return StringCtor(value);
    if (depth >= MAX_DEPTH) return isArray(value) ? "[Array]" : "[Object]";
    seen.push(value);
    try {
      if (isArray(value)) {
        const items = itemsOf(value, 0, MAX_ITEMS).map((v) => inspect(v, depth + 1, seen));
        if (value.length > MAX_ITEMS) items.push(`... ${value.length - MAX_ITEMS} more items`);
        return `[ ${items.join(", ")} ]`;
      }
      if (value instanceof Map) {
        const items: string[] = [];
        for (const [k, v] of value) {
          if (items.length >= MAX_ITEMS) break;
          items.push(`${inspect(k, depth + 1, seen)} => ${inspect(v, depth + 1, seen)}`);
        }
        return `Map(${value.size}) { ${items.join(", ")} }`;
      }
      if (value instanceof Set) {
        const items: string[] = [];
        for (const v of value) {
          if (items.length >= MAX_ITEMS) break;
          items.push(inspect(v, depth + 1, seen));
        }
        return `Set(${value.size}) { ${items.join(", ")} }`;
      }
      if (ArrayBuffer.isView(value)) {
        const view = value as unknown as ArrayLike<unknown>;
        const name = getProto(value)?.constructor?.name ?? "TypedArray";
        const shown = itemsOf(view, 0, MAX_ITEMS).map((v) => inspect(v, depth + 1, seen));
        return `${name}(${view.length}) [ ${shown.join(", ")} ]`;
      }
      const proto = getProto(value);
      const prefix = proto === ObjectProto || proto === null ? "" : `${proto?.constructor?.name ?? "Object"} `;
      const keys = ownKeys(value as object);
      const parts = itemsOf(keys, 0, MAX_ITEMS).map((k) => {
        const name = IDENT.test(k) ? k : stringify(k);
        return `${name}: ${inspect((value as Record<string, unknown>)[k], depth + 1, seen)}`;
      });
      if (keys.length > MAX_ITEMS) parts.push(`... ${keys.length - MAX_ITEMS} more keys`);
      return parts.length ? `${prefix}{ ${parts.join(", ")} }` : `${prefix}{}`;
    } catch {
      return "[Uninspectable]";
    } finally {
      seen.pop();
    }
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
        if (typeof arg === "bigint") return `${arg}n`;
        if (typeof arg === "number") return numberText(arg);
        if (typeof arg === "symbol") return arg.toString();
        if (arg === null || (typeof arg !== "object" && typeof arg !== "function")) return StringCtor(arg);
        const own = (arg as { toString?: unknown }).toString;
        let builtin = typeof own !== "function";
        for (let i = 0; i < builtinToStrings.length && !builtin; i++) builtin = own === builtinToStrings[i];
        // Node prints such an object one level deep.
        return builtin ? inspect(arg, MAX_DEPTH - 1, []) : StringCtor(arg);
      }
      case 0x64: // %d
        if (typeof arg === "bigint") return `${arg}n`;
        return typeof arg === "symbol" ? "NaN" : numberText(NumberCtor(arg));
      case 0x69: // %i
        if (typeof arg === "bigint") return `${arg}n`;
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
        return inspect(arg, typeof arg === "string" ? 1 : 0, []);
      default: // %c: styles, which a line of text has none of
        return "";
    }
  }

  /** The format string with its specifiers replaced; how many arguments they took (the string included). */
  function substitute(format: string, args: unknown[]): [string, number] {
    let text = "";
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
      text += before + piece;
      last = i + 2;
      i++;
    }
    return [text + sliceOf(format, last, n), used];
  }

  return function formatLogArgs(args, maxChars) {
    let out = "";
    left = maxChars;
    let start = 0;
    const first = args[0];
    if (args.length > 1 && typeof first === "string" && indexOfIn(first, "%") >= 0) {
      const [text, used] = substitute(first, args);
      if (text.length > maxChars) return sliceOf(text, 0, maxChars);
      out = text;
      left = maxChars - text.length;
      start = used;
    }
    for (let i = start; i < args.length; i++) {
      let part: string;
      try {
        part = inspect(args[i], 0, []);
      } catch {
        part = "[Uninspectable]";
      }
      out += i === 0 ? part : ` ${part}`;
      if (out.length > maxChars) return sliceOf(out, 0, maxChars);
    }
    return out;
  };
}
