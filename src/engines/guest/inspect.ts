/**
 * Formats console arguments into one line of text, like a small `util.format`.
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

  return function formatLogArgs(args, maxChars) {
    let out = "";
    left = maxChars;
    for (let i = 0; i < args.length; i++) {
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
