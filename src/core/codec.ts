/**
 * The value codec: the one way data crosses between the host and a guest, in both directions.
 *
 * Values are encoded to tagged JSON text. Plain JSON values stay as they are; everything else
 * is an object with a "$" tag (`{"$":"d","v":0}` is a Date). A plain object that has its own
 * "$" key is escaped as `{"$":"o","v":{...}}`, so no guest value can forge a tag.
 *
 * `createCodec` is SELF-CONTAINED on purpose: engines inject `createCodec.toString()` into the
 * guest realm, so the guest encodes with exactly the code the host decodes with. It must not
 * reference anything outside its own body (no imports, no module-level values).
 *
 * The host only ever decodes text: it never reads a guest object, runs a getter, a Proxy trap,
 * `toString` or a thenable (security invariant 2). Encoding runs in the guest, under its limits.
 */
export interface Codec {
  /**
   * Encode `value` to text; throws a TypeError with `code` ERR_NOT_SERIALIZABLE naming the path.
   * `stacks: false` leaves errors' stacks out: for what the host sends a guest (host frames and
   * paths never reach a guest).
   */
  encode(value: unknown, rootPath?: string, maxChars?: number, stacks?: boolean): string;
  /**
   * `encode` when it needs no walk (a primitive, or plain JSON data in the host's codec), else
   * undefined. Plain data holds no Request or Response, so a caller can skip looking for bodies.
   */
  encodeFast(value: unknown, rootPath?: string, maxChars?: number): string | undefined;
  decode(text: string): unknown;
  /** Decode an already-parsed tree (saves a second JSON.parse when the text was parsed for framing). */
  revive(tree: unknown): unknown;
  /** Encode an error leniently: fields that cannot cross are described, never fatal. `stacks` as for `encode`. */
  encodeError(error: unknown, stacks?: boolean, maxChars?: number): string;
  /**
   * Did this codec's latest encode fail with `error`? A guest can throw a look-alike (an object
   * with `code: "ERR_OUTPUT_TOO_LARGE"`) from a getter the encoder runs; only the codec's own
   * failure is one.
   */
  threw(error: unknown): boolean;
  /** Is `error` one this codec failed with, at any time (a look-alike a guest made is not)? */
  refused(error: unknown): boolean;
  /** Teach the codec more types (Request, Response, Headers): a tag of one capital letter each. */
  extend(extension: CodecExtension): void;
  /**
   * The most characters any encoding in this realm may write, whatever its own limit: past it
   * the encoder fails with ERR_MEMORY_LIMIT before it copies. A V8 isolate aborts the whole
   * process when one allocation overruns its heap limit; the copy an encoding makes is such an
   * allocation (a 15 MiB string handed to a host function, with memoryMb 32).
   */
  limitCopies(chars: number): void;
}

export interface CodecExtension {
  /** A tagged plain object for values this extension owns, else undefined. */
  encode(value: object): (Record<string, unknown> & { $: string }) | undefined;
  /** The value for a tagged object this extension owns (fields revived with `revive`), else undefined. */
  decode(tagged: Record<string, unknown>, revive: (value: unknown) => unknown): unknown;
}

/** `trusted` is for the host's own codec only: it enables a JSON.stringify fast path for plain data. */
export function createCodec(trusted = false): Codec {
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const getProto = Object.getPrototypeOf;
  const ownKeys = Object.keys;
  // Methods are called through functions bound once, here, before any guest code: `m.call(x)` and
  // `m.apply(...)` look up Function.prototype.call and .apply at each call, and a guest that
  // replaced them changed what its own values were reported as (a Map came back as a Date).
  const callOf = Function.prototype.call;
  const uncurry = <A extends unknown[], R>(method: (...args: A) => R) =>
    callOf.bind(method) as unknown as (self: unknown, ...args: A) => R;
  const applyFn = Reflect.apply;
  const hasOwn = uncurry(ObjectProto.hasOwnProperty) as (o: object, k: string) => boolean;
  const charCodeOf = uncurry(String.prototype.charCodeAt);
  const sliceOf = uncurry(String.prototype.slice) as (self: string, start: number, end?: number) => string;
  const Uint8 = Uint8Array;
  const defineProperty = Object.defineProperty;
  const setPrototypeOf = Object.setPrototypeOf;
  /**
   * An array no prototype reaches: writing an index that is not its own yet would otherwise meet
   * an accessor a guest put on Array.prototype (say "0"), which would swallow the write and make
   * every encode of its own results fail with a misleading "Invalid array length".
   */
  const bareArray = <T>(): T[] => setPrototypeOf([], null) as T[];
  const isArray = Array.isArray;
  const stringify = JSON.stringify;
  /** Characters jsonLength copies at a time. */
  const LENGTH_CHUNK = 65_536;
  const parse = JSON.parse;
  const StringCtor = String;
  const NumberIsFinite = Number.isFinite;
  const fromCharCode = String.fromCharCode;
  const ArrayBufferCtor = ArrayBuffer;
  const isView = ArrayBuffer.isView;
  const getterOf = (proto: object, name: string | symbol) =>
    uncurry((Object.getOwnPropertyDescriptor(proto, name) as PropertyDescriptor).get as () => unknown);
  const byteLengthOf = getterOf(ArrayBuffer.prototype, "byteLength") as (buffer: unknown) => number;
  const TypedArrayProto = getProto(Uint8Array.prototype);
  const typedArrayTag = getterOf(TypedArrayProto, Symbol.toStringTag) as (view: unknown) => string | undefined;
  // A view's own getters, not its properties: a guest may shadow them on its objects or prototypes.
  const viewParts = {
    typed: [
      getterOf(TypedArrayProto, "buffer"),
      getterOf(TypedArrayProto, "byteOffset"),
      getterOf(TypedArrayProto, "byteLength"),
    ],
    data: [
      getterOf(DataView.prototype, "buffer"),
      getterOf(DataView.prototype, "byteOffset"),
      getterOf(DataView.prototype, "byteLength"),
    ],
  } as {
    typed: [(v: unknown) => ArrayBuffer, (v: unknown) => number, (v: unknown) => number];
    data: [(v: unknown) => ArrayBuffer, (v: unknown) => number, (v: unknown) => number];
  };
  const typedLength = getterOf(TypedArrayProto, "length") as (view: unknown) => number;
  const dateGetTime = uncurry(Date.prototype.getTime);
  const DateCtor = Date;
  const MapCtor = Map;
  const SetCtor = Set;
  const mapSize = getterOf(Map.prototype, "size") as (map: unknown) => number;
  const setSize = getterOf(Set.prototype, "size") as (set: unknown) => number;
  // forEach, not iterators: an iterator's `next` (and array destructuring) are the guest's to replace.
  const mapForEach = uncurry(Map.prototype.forEach) as (map: unknown, fn: (value: unknown, key: unknown) => void) => void;
  const setForEach = uncurry(Set.prototype.forEach) as (set: unknown, fn: (value: unknown) => void) => void;
  const ErrorCtor = Error;
  /**
   * The builtins a non-plain object may be, by the prototype that marks each: the chain picks the
   * one brand getter to try (BRAND_*), so a real one costs no thrown TypeError. Trying each in
   * turn cost a Set three throws and an Error four, and QuickJS records the whole stack on each
   * (2000 Sets at depth 100: 4 s of CPU).
   */
  const BRAND_PROTOS = [ArrayBuffer.prototype, Date.prototype, Map.prototype, Set.prototype] as object[];
  const BRAND_ERROR = 4;
  const ErrorProto = Error.prototype;
  const TypeErrorCtor = TypeError;
  const errorCtors: Record<string, ErrorConstructor> = {
    Error,
    TypeError,
    RangeError,
    SyntaxError,
    ReferenceError,
    EvalError,
    URIError,
  };
  // biome-ignore lint/suspicious/noExplicitAny: typed array constructors differ only in element type.
  const typedCtors: Record<string, any> = {};
  for (const name of [
    "Int8Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "Float32Array",
    "Float64Array",
    "BigInt64Array",
    "BigUint64Array",
    "DataView",
  ]) {
    // biome-ignore lint/suspicious/noExplicitAny: looking up constructors by name on this realm's global.
    const ctor = (globalThis as any)[name];
    if (typeof ctor === "function") typedCtors[name] = ctor;
  }
  // The host's codec allows a few levels more: it encodes a guest's value again inside an
  // envelope (a process worker's `result.exports.name`, `result.error.fields.name`), and a value
  // the guest's codec accepted must not fail there.
  const MAX_DEPTH = trusted ? 520 : 512;
  /** Longer paths are shortened in messages (`shown`). */
  const MAX_SHOWN_PATH = 120;
  /** BigInts cross as decimal text of at most this many characters (sign included). */
  const MAX_BIGINT_CHARS = 100_000;
  /** 2 ** 332193 has 100,001 digits (2 ** 332192 has 100,000): a BigInt this many bits long is over the cap. */
  const MAX_BIGINT_BITS = 332_193n;
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const B64_INDEX = new Uint8Array(128);
  for (let i = 0; i < B64.length; i++) B64_INDEX[charCodeOf(B64, i)] = i;
  const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
  let extension: CodecExtension | undefined;

  function toBase64(bytes: Uint8Array): string {
    let out = "";
    const chunk = bareArray<number>();
    let c = 0;
    let i = 0;
    const length = typedLength(bytes);
    for (; i + 2 < length; i += 3) {
      const n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
      chunk[c++] = charCodeOf(B64, n >> 18);
      chunk[c++] = charCodeOf(B64, (n >> 12) & 63);
      chunk[c++] = charCodeOf(B64, (n >> 6) & 63);
      chunk[c++] = charCodeOf(B64, n & 63);
      if (c >= 8192) {
        out += applyFn(fromCharCode, null, chunk);
        chunk.length = 0;
        c = 0;
      }
    }
    if (i < length) {
      const n = (bytes[i] << 16) | ((i + 1 < length ? bytes[i + 1] : 0) << 8);
      chunk[c++] = charCodeOf(B64, n >> 18);
      chunk[c++] = charCodeOf(B64, (n >> 12) & 63);
      chunk[c++] = i + 1 < length ? charCodeOf(B64, (n >> 6) & 63) : 61;
      chunk[c++] = 61;
    }
    return out + applyFn(fromCharCode, null, chunk);
  }

  function fromBase64(text: string): Uint8Array {
    let len = text.length;
    while (len > 0 && charCodeOf(text, len - 1) === 61) len--;
    const size = (len * 3) >> 2;
    const out = new Uint8(size);
    let o = 0;
    for (let i = 0; i < len; i += 4) {
      const n =
        (B64_INDEX[charCodeOf(text, i)] << 18) |
        (B64_INDEX[charCodeOf(text, i + 1)] << 12) |
        ((i + 2 < len ? B64_INDEX[charCodeOf(text, i + 2)] : 0) << 6) |
        (i + 3 < len ? B64_INDEX[charCodeOf(text, i + 3)] : 0);
      out[o++] = n >> 16;
      if (o < size) out[o++] = (n >> 8) & 255;
      if (o < size) out[o++] = n & 255;
    }
    return out;
  }

  /** The error the latest encode failed with (see `threw`). */
  let lastFailure: unknown;
  /** Every error this codec failed with: a guest cannot make one (see `refused`). */
  const failures = new WeakSet<object>();
  const weakAdd = uncurry(WeakSet.prototype.add) as (set: WeakSet<object>, value: object) => void;
  const weakHas = uncurry(WeakSet.prototype.has) as (set: WeakSet<object>, value: unknown) => boolean;
  /** See `limitCopies`. */
  let copyCeiling = Number.POSITIVE_INFINITY;

  /**
   * The length of JSON.stringify(text), counted without copying the whole text; past `stopAt`, a
   * length past it. JSON.stringify counts, a chunk at a time (a surrogate pair kept in one chunk):
   * a loop of ours took QuickJS ~0.5 µs a character (a 15 MiB result ran into the wall time; found
   * by review), and its regular expressions ~0.3 µs to find no escape (12 MiB: 3.6 s), against
   * ~0.05 µs for its JSON.stringify.
   */
  function jsonLength(text: string, stopAt: number): number {
    let n = 2;
    for (let i = 0; i < text.length && n <= stopAt; ) {
      let end = i + LENGTH_CHUNK;
      if (end < text.length && (charCodeOf(text, end - 1) & 0xfc00) === 0xd800) end++;
      n += (stringify(sliceOf(text, i, end)) as string).length - 2;
      i = end;
    }
    return n;
  }

  function tooLargeToCopy(rootPath: string): string {
    return `${rootPath} is too large to copy within the instance's memory limit (more than ${copyCeiling} characters)`;
  }

  function fail(code: string, path: string, message: string): never {
    const error = new TypeErrorCtor(message);
    weakAdd(failures, error);
    // Defined, not assigned: a setter a guest put on Object.prototype must not swallow them.
    defineProperty(error, "code", { value: code, writable: true, enumerable: true, configurable: true });
    defineProperty(error, "path", { value: path, writable: true, enumerable: true, configurable: true });
    lastFailure = error;
    throw error;
  }

  /**
   * A path as a message shows it: past MAX_SHOWN_PATH characters (deep nesting, a long key) its
   * two ends, which say where the value sits and what it is. The error's `path` keeps it whole.
   */
  function shown(path: string): string {
    if (path.length <= MAX_SHOWN_PATH) return path;
    const end = MAX_SHOWN_PATH >> 1;
    return `${sliceOf(path, 0, end)}…(${path.length - 2 * end} characters)…${sliceOf(path, path.length - end)}`;
  }

  function child(path: string, key: string | number): string {
    if (typeof key === "number") return `${path}[${key}]`;
    return IDENT.test(key) ? `${path}.${key}` : `${path}[${stringify(key)}]`;
  }

  function kindOf(value: unknown): string {
    if (typeof value === "function") return "a function";
    if (typeof value === "symbol") return "a symbol";
    if (value !== null && typeof value === "object") {
      try {
        const proto = getProto(value);
        const ctor = proto && hasOwn(proto, "constructor") ? proto.constructor : undefined;
        const name = typeof ctor === "function" && typeof ctor.name === "string" ? ctor.name : "";
        return name ? `an instance of ${name}` : "an object with a custom prototype";
      } catch {
        return "an object";
      }
    }
    return `a ${typeof value}`;
  }

  function notSerializable(path: string, value: unknown): never {
    const what = kindOf(value);
    const hint = typeof value === "function" ? "functions cannot cross between the host and the guest" : "only data crosses";
    return fail(
      "ERR_NOT_SERIALIZABLE",
      path,
      `${shown(path)} is ${what}; ${hint} (JSON values, undefined, Date, Map, Set, typed arrays, ArrayBuffer, BigInt, Error)`,
    );
  }

  /**
   * Walk `root` and write its tagged JSON text directly. JSON.stringify is applied to strings
   * only: it would call a guest-defined `toJSON` on objects and let a guest forge tags.
   */
  function encodeWith(root: unknown, rootPath: string, maxChars: number, lenient: boolean, stacks = true): string {
    const capped = copyCeiling < maxChars;
    let budget = capped ? copyCeiling : maxChars;
    // The objects being walked (for cycles) and the keys that led to the current value. A path
    // string is built only for an error: one per property would dominate the cost of encoding.
    const stack = bareArray<unknown>();
    const trail = bareArray<string | number>();
    const pathOf = (): string => {
      let out = rootPath;
      for (let i = 0; i < trail.length; i++) {
        const key = trail[i];
        out = typeof key === "string" && charCodeOf(key, 0) === 0 ? out + sliceOf(key, 1) : child(out, key);
      }
      return out;
    };
    const spend = (n: number) => {
      budget -= n;
      if (budget >= 0) return;
      if (capped) fail("ERR_MEMORY_LIMIT", pathOf(), tooLargeToCopy(rootPath));
      fail("ERR_OUTPUT_TOO_LARGE", pathOf(), `${rootPath} is larger than the limit of ${maxChars} bytes`);
    };
    const str = (text: string) => stringify(StringCtor(text)) as string;
    /**
     * `text` as a JSON string, charged at its written length (+ `extra`). Escapes make the copy up
     * to six times the text (a control character is `\u0001`): when that worst case would pass
     * what is left, the written length is counted before copying (found by review: a string of
     * control characters under the copy ceiling aborted the in-process host); else the copy is
     * made and charged as it is.
     */
    const quoted = (text: string, extra = 0): string => {
      const worst = text.length * 6 + 2 + extra > budget;
      // Over even unescaped: refused without counting (spend throws).
      if (worst) spend(text.length + 2 + extra > budget ? text.length + 2 + extra : jsonLength(text, budget) + extra);
      const out = str(text);
      if (!worst) spend(out.length + extra);
      return out;
    };

    /** Walk a child value; a key starting with NUL is appended to the path as it is. */
    function at(value: unknown, key: string | number): string {
      trail[trail.length] = key;
      try {
        return walk(value);
      } finally {
        trail.length--;
      }
    }

    function walk(value: unknown): string {
      switch (typeof value) {
        case "string":
          return quoted(value);
        case "boolean":
          spend(5);
          return value ? "true" : "false";
        case "number":
          spend(8);
          if (NumberIsFinite(value) && !(value === 0 && 1 / value < 0)) return StringCtor(value);
          return `{"$":"n","v":"${value === 0 ? "-0" : StringCtor(value)}"}`;
        case "undefined":
          spend(8);
          return '{"$":"u"}';
        case "bigint": {
          // Bounded by its bit length first (a shift: linear): decimal text takes time that grows
          // faster than its length (1n << 1000000n took QuickJS 4 s before it was refused).
          const tooLong = (value < 0n ? -value : value) >> MAX_BIGINT_BITS !== 0n;
          const digits = tooLong ? "" : StringCtor(value);
          if (tooLong || digits.length > MAX_BIGINT_CHARS) {
            const path = pathOf();
            fail("ERR_NOT_SERIALIZABLE", path, `${shown(path)} is a BigInt of more than ${MAX_BIGINT_CHARS} digits`);
          }
          spend(digits.length + 16);
          return `{"$":"b","v":"${digits}"}`;
        }
        case "object":
          break;
        default:
          if (lenient) return str(`[not serializable: ${kindOf(value)}]`);
          return notSerializable(pathOf(), value);
      }
      if (value === null) {
        spend(4);
        return "null";
      }
      // Index-based stack operations: a guest may replace Array.prototype methods at any time.
      for (let i = 0; i < stack.length; i++) {
        if (stack[i] !== value) continue;
        if (lenient) return '"[circular]"';
        const path = pathOf();
        fail("ERR_NOT_SERIALIZABLE", path, `${shown(path)} is a circular reference; only trees of data can cross`);
      }
      if (stack.length >= MAX_DEPTH) {
        const path = pathOf();
        fail("ERR_NOT_SERIALIZABLE", path, `${shown(path)} is nested deeper than ${MAX_DEPTH} levels`);
      }
      const depth = stack.length;
      stack[depth] = value;
      try {
        return walkObject(value as object);
      } finally {
        stack.length = depth;
      }
    }

    function walkObject(value: object): string {
      if (isArray(value)) {
        const length = (value as unknown[]).length;
        spend(2 + length);
        let out = "[";
        for (let i = 0; i < length; i++) out += (i ? "," : "") + at((value as unknown[])[i], i);
        return `${out}]`;
      }
      const proto = getProto(value);
      if (proto === ObjectProto || proto === null) return walkPlain(value);
      if (isView(value)) {
        const tag = typedArrayTag(value) ?? "DataView";
        // Only the kinds every realm has: the host (Node 20) has no Float16Array, and revived as
        // raw bytes one came back a Uint8Array.
        if (!hasOwn(typedCtors, tag)) {
          if (lenient) return str(`[not serializable: a ${tag}]`);
          const path = pathOf();
          fail(
            "ERR_NOT_SERIALIZABLE",
            path,
            `${shown(path)} is a ${tag}, a kind of typed array that does not cross (the others do)`,
          );
        }
        // Indexed, not destructured: destructuring runs the guest-replaceable array iterator.
        const parts = tag === "DataView" ? viewParts.data : viewParts.typed;
        let bytes: Uint8Array;
        try {
          bytes = new Uint8(parts[0](value), parts[1](value), parts[2](value));
        } catch {
          return detached("a view on a detached ArrayBuffer");
        }
        spend(typedLength(bytes) * 1.4 + 16);
        return `{"$":"t","t":"${tag}","v":"${toBase64(bytes)}"}`;
      }
      // Brand checks decide, the prototype chain only picks which to try first: subclasses are
      // recognised, and a look-alike object with a borrowed prototype is not.
      const likely = brandByChain(proto);
      // A real Error holds its own stack (V8, QuickJS): only an object that borrowed Error.prototype
      // lacks it, and is checked against every brand below.
      if (likely === BRAND_ERROR && hasOwn(value, "stack")) return encodeErrorValue(value as Error);
      if (likely >= 0 && likely < BRAND_ERROR) {
        const out = branded(likely, value);
        if (out !== undefined) return out;
      }
      // No chain or a lying one (a Map given Set.prototype, a Proxy): every brand, each may throw.
      for (let brand = 0; brand < BRAND_ERROR; brand++) {
        if (brand === likely) continue;
        const out = branded(brand, value);
        if (out !== undefined) return out;
      }
      if (value instanceof ErrorCtor) return encodeErrorValue(value);
      let extended: ReturnType<CodecExtension["encode"]>;
      try {
        extended = extension?.encode(value);
      } catch (error) {
        // A Request or Response with no body to send (read already, or never read where bodies
        // are): in an error's fields it is described, as any field that cannot cross is.
        if (lenient) return str(`[not serializable: ${kindOf(value)}]`);
        throw error;
      }
      if (extended !== undefined) return walkTagged(extended);
      if (lenient) return str(`[not serializable: ${kindOf(value)}]`);
      return notSerializable(pathOf(), value);
    }

    /**
     * A buffer whose memory was transferred away (structuredClone's transfer, `transfer()`), or a
     * view on one: viewing it throws. Its engine's TypeError named no path and no code.
     */
    function detached(what: string): string {
      if (lenient) return str(`[not serializable: ${what}]`);
      const path = pathOf();
      return fail("ERR_NOT_SERIALIZABLE", path, `${shown(path)} is ${what}; its bytes are gone`);
    }

    /** The BRAND_* index of the first builtin prototype on the chain from `proto`, else -1. */
    function brandByChain(proto: object | null): number {
      // Bounded: a longer chain is left to the brand checks, which stay correct.
      for (let n = 0; proto !== null && proto !== ObjectProto && n < 32; n++) {
        if (proto === ErrorProto) return BRAND_ERROR;
        for (let i = 0; i < BRAND_ERROR; i++) if (proto === BRAND_PROTOS[i]) return i;
        proto = getProto(proto);
      }
      return -1;
    }

    /** `value` encoded as builtin `brand` (BRAND_*) when its brand getter accepts it, else undefined. */
    function branded(brand: number, value: object): string | undefined {
      if (brand === 0) {
        let byteLength = -1;
        try {
          byteLength = byteLengthOf(value);
        } catch {}
        if (byteLength < 0) return undefined;
        let bytes: Uint8Array;
        try {
          bytes = new Uint8(value as ArrayBuffer);
        } catch {
          return detached("a detached ArrayBuffer");
        }
        spend(byteLength * 1.4 + 16);
        return `{"$":"a","v":"${toBase64(bytes)}"}`;
      }
      if (brand === 1) {
        let time: number | undefined;
        try {
          time = dateGetTime(value);
        } catch {}
        if (time === undefined) return undefined;
        spend(24);
        return `{"$":"d","v":${NumberIsFinite(time) ? StringCtor(time) : "null"}}`;
      }
      let size = -1;
      try {
        size = brand === 2 ? mapSize(value) : setSize(value);
      } catch {}
      if (size < 0) return undefined;
      let out = "";
      let i = 0;
      if (brand === 2) {
        spend(8 + size * 4);
        mapForEach(value, (v, k) => {
          out += `${i ? "," : ""}[${at(k, `\0<entry ${i}>.key`)},${at(v, `\0<entry ${i}>.value`)}]`;
          i++;
        });
        return `{"$":"m","v":[${out}]}`;
      }
      spend(8 + size * 2);
      setForEach(value, (v) => {
        out += (i ? "," : "") + at(v, `\0<item ${i}>`);
        i++;
      });
      return `{"$":"s","v":[${out}]}`;
    }

    function walkPlain(value: object): string {
      const keys = ownKeys(value);
      spend(2 + keys.length * 2);
      let out = "";
      let escaped = false;
      // Every key loop is indexed: `for…of` runs Array.prototype[Symbol.iterator], which a guest
      // can replace to yield an object whose toString says "$" (it is not === "$", so the object
      // was not escaped, and a Date, Map or BigInt came out of plain data).
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (key === "$") escaped = true;
        out += `${out ? "," : ""}${quoted(key, 1)}:${at((value as Record<string, unknown>)[key], key)}`;
      }
      // A plain object with its own "$" key is escaped, so no guest value can forge a tag.
      return escaped ? `{"$":"o","v":{${out}}}` : `{${out}}`;
    }

    /** An extension's tagged form: its fields are data the codec encodes like any other. */
    function walkTagged(tagged: Record<string, unknown>): string {
      let out = `"$":${str(StringCtor(tagged.$))}`;
      const keys = ownKeys(tagged);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (key !== "$") out += `,${str(key)}:${at(tagged[key], key)}`;
      }
      return `{${out}}`;
    }

    function encodeErrorValue(error: Error): string {
      // Errors cross leniently: a field that cannot cross is described, so the real error is not
      // replaced by a serialization failure.
      const saved = lenient;
      lenient = true;
      try {
        let name = "Error";
        let message = "";
        let stackText: unknown;
        try {
          name = StringCtor(error.name);
          message = StringCtor(error.message);
          if (stacks) stackText = error.stack;
        } catch {}
        // Charged as every string is (a 60 MiB message was copied whole).
        let out = `"$":"e","n":${quoted(name, 8)},"m":${quoted(message, 5)}`;
        if (typeof stackText === "string") out += `,"s":${quoted(stackText, 5)}`;
        if (hasOwn(error, "cause")) out += `,"c":${at((error as { cause?: unknown }).cause, "cause")}`;
        const nested = (error as { errors?: unknown }).errors;
        const listed = isArray(nested);
        if (listed) out += `,"a":${at(nested, "errors")}`;
        let fields = "";
        const keys = ownKeys(error);
        for (let i = 0; i < keys.length; i++) {
          const key = keys[i];
          if (key === "stack" || key === "message" || key === "cause" || (key === "errors" && listed)) continue;
          fields += `${fields ? "," : ""}${str(key)}:${at((error as unknown as Record<string, unknown>)[key], key)}`;
        }
        if (fields) out += `,"f":{${fields}}`;
        return `{${out}}`;
      } finally {
        lenient = saved;
      }
    }

    return walk(root);
  }

  /**
   * Turn a parsed tree into values, IN PLACE: trees come straight from JSON.parse, so plain
   * objects and arrays are reused and only tagged objects are replaced (half the allocation).
   */
  function revive(value: unknown): unknown {
    if (value === null || typeof value !== "object") return value;
    if (isArray(value)) {
      for (let i = 0; i < value.length; i++) {
        const item = value[i];
        if (item !== null && typeof item === "object") value[i] = revive(item);
      }
      return value;
    }
    const tagged = value as Record<string, unknown>;
    if (!hasOwn(tagged, "$")) return reviveObject(tagged);
    const v = tagged.v;
    switch (tagged.$) {
      case "o":
        return reviveObject(v as Record<string, unknown>);
      case "u":
        return undefined;
      case "n":
        return v === "-0" ? -0 : Number(v);
      case "b":
        // Reading a decimal BigInt takes time that grows faster than its length (1M digits: 120
        // ms here): text past the cap the encoder keeps is refused unread.
        if (typeof v !== "string" || v.length > MAX_BIGINT_CHARS)
          fail("ERR_NOT_SERIALIZABLE", "value", "a BigInt is too long to read");
        return BigInt(v);
      case "d":
        return new DateCtor(v === null ? Number.NaN : (v as number));
      case "m":
        return new MapCtor((v as [unknown, unknown][]).map(([k, x]) => [revive(k), revive(x)]));
      case "s":
        return new SetCtor((v as unknown[]).map(revive));
      case "a": {
        const bytes = fromBase64(v as string);
        return bytes.buffer.byteLength === bytes.byteLength ? bytes.buffer : new ArrayBufferCtor(0);
      }
      case "t": {
        if (!hasOwn(typedCtors, tagged.t as string))
          fail("ERR_NOT_SERIALIZABLE", "value", `a ${StringCtor(tagged.t)} cannot be read here`);
        const bytes = fromBase64(v as string);
        const ctor = typedCtors[tagged.t as string];
        if (ctor === typedCtors.DataView) return new ctor(bytes.buffer);
        return new ctor(bytes.buffer, 0, bytes.byteLength / (ctor.BYTES_PER_ELEMENT as number));
      }
      case "e":
        return reviveError(tagged);
      default: {
        const extended = extension?.decode(tagged, revive);
        return extended === undefined ? reviveObject(tagged) : extended;
      }
    }
  }

  function reviveObject(value: Record<string, unknown>): Record<string, unknown> {
    const keys = ownKeys(value);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      const item = value[key];
      if (item === null || typeof item !== "object") continue;
      const revived = revive(item);
      if (revived === item) continue;
      // An own "__proto__" key is data: define it, never assign it (assignment sets the prototype).
      if (key === "__proto__")
        defineProperty(value, key, { value: revived, enumerable: true, writable: true, configurable: true });
      else value[key] = revived;
    }
    return value;
  }

  function reviveError(tagged: Record<string, unknown>): Error {
    const name = StringCtor(tagged.n);
    const message = StringCtor(tagged.m);
    let error: Error;
    if (name === "AggregateError" && typeof AggregateError === "function") {
      error = new AggregateError(isArray(tagged.a) ? (revive(tagged.a) as unknown[]) : [], message);
    } else {
      const ctor = hasOwn(errorCtors, name) ? errorCtors[name] : ErrorCtor;
      error = new ctor(message);
      if (error.name !== name) defineProperty(error, "name", { value: name, writable: true, configurable: true });
      // Any error's `errors` list crosses as "a", not only an AggregateError's.
      if (isArray(tagged.a))
        defineProperty(error, "errors", { value: revive(tagged.a), enumerable: true, writable: true, configurable: true });
    }
    defineProperty(error, "stack", {
      value: typeof tagged.s === "string" ? tagged.s : `${name}: ${message}`,
      writable: true,
      configurable: true,
    });
    if (hasOwn(tagged, "c")) defineProperty(error, "cause", { value: revive(tagged.c), writable: true, configurable: true });
    if (tagged.f && typeof tagged.f === "object") {
      const fields = tagged.f as Record<string, unknown>;
      const keys = ownKeys(fields);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        defineProperty(error, key, { value: revive(fields[key]), enumerable: true, writable: true, configurable: true });
      }
    }
    return error;
  }

  /**
   * True when `value` is plain JSON that JSON.stringify writes exactly as the walk would: plain
   * objects and arrays of strings, booleans, null and finite non-negative-zero numbers, no "$"
   * or "toJSON" keys. Only the host uses it (`trusted`): in a guest realm a getter could answer
   * differently on the second read.
   */
  function primitiveText(value: unknown): string | undefined {
    switch (typeof value) {
      case "string":
        return stringify(value) as string;
      case "boolean":
        return value ? "true" : "false";
      case "number":
        return NumberIsFinite(value) && !(value === 0 && 1 / value < 0) ? StringCtor(value) : undefined;
      case "undefined":
        return '{"$":"u"}';
      default:
        return value === null ? "null" : undefined;
    }
  }

  /**
   * True when JSON.stringify gives exactly what the walk would (no toJSON, tag, special number,
   * undefined, hole or class instance anywhere). Primitive children are checked inline and keys
   * come from for-in (no key array): 2.6× faster than recursing into every value, measured on
   * a batch of 32 events (15 -> 5.8 µs). for-in also lists inherited enumerable keys, which only
   * adds checks: JSON.stringify reads own keys, a subset.
   */
  function isPlainJson(value: object, depth: number): boolean {
    if (depth > 64) return false;
    if (isArray(value)) {
      if (getProto(value) !== ArrayProto) return false;
      for (let i = 0; i < value.length; i++) {
        const item: unknown = value[i];
        if (typeof item === "string" || typeof item === "boolean" || item === null) continue;
        if (typeof item === "number") {
          if (NumberIsFinite(item) && !(item === 0 && 1 / item < 0)) continue;
          return false;
        }
        if (typeof item !== "object" || !(i in value) || !isPlainJson(item, depth + 1)) return false;
      }
      return true;
    }
    const proto = getProto(value);
    if (proto !== ObjectProto && proto !== null) return false;
    for (const key in value) {
      if (key === "$" || key === "toJSON" || key === "__proto__") return false;
      const item: unknown = (value as Record<string, unknown>)[key];
      if (typeof item === "string" || typeof item === "boolean" || item === null) continue;
      if (typeof item === "number") {
        if (NumberIsFinite(item) && !(item === 0 && 1 / item < 0)) continue;
        return false;
      }
      if (typeof item !== "object" || !isPlainJson(item, depth + 1)) return false;
    }
    return true;
  }

  function encodeFast(value: unknown, rootPath: string, maxChars: number): string | undefined {
    // A primitive root needs no walk, whose setup is most of its cost in an interpreter
    // (measured in QuickJS: 9.5 µs to encode 1, 0.5 µs this way). JSON.stringify of a string
    // never consults toJSON (only objects and BigInts have it called), so no tag can be forged.
    // A string over the limit is refused before JSON.stringify copies it (escapes counted): the
    // caller's limit when it is the lower one, else the copy ceiling.
    if (typeof value === "string") {
      // biome-ignore lint/complexity/useMathMinMax: Math is the guest's to replace in its realm.
      const limit = maxChars <= copyCeiling ? maxChars : copyCeiling;
      if (value.length * 6 + 2 > limit && (value.length + 2 > limit || jsonLength(value, limit) > limit)) {
        if (maxChars <= copyCeiling)
          fail("ERR_OUTPUT_TOO_LARGE", rootPath, `${rootPath} is larger than the limit of ${maxChars} bytes`);
        fail("ERR_MEMORY_LIMIT", rootPath, tooLargeToCopy(rootPath));
      }
    }
    const primitive = primitiveText(value);
    if (primitive !== undefined) {
      const text = primitive;
      if (text.length > maxChars)
        fail("ERR_OUTPUT_TOO_LARGE", rootPath, `${rootPath} is larger than the limit of ${maxChars} bytes`);
      return text;
    }
    if (
      trusted &&
      !("toJSON" in ObjectProto) &&
      !("toJSON" in ArrayProto) &&
      typeof value === "object" &&
      value !== null &&
      isPlainJson(value, 0)
    ) {
      // A leading space (valid JSON) tells the decoder there is no tag to revive.
      const text = ` ${stringify(value) as string}`;
      if (text.length > maxChars)
        fail("ERR_OUTPUT_TOO_LARGE", rootPath, `${rootPath} is larger than the limit of ${maxChars} bytes`);
      return text;
    }
    return undefined;
  }

  return {
    encode(value, rootPath = "value", maxChars = Number.POSITIVE_INFINITY, stacks = true) {
      lastFailure = undefined;
      return encodeFast(value, rootPath, maxChars) ?? encodeWith(value, rootPath, maxChars, false, stacks);
    },
    encodeFast(value, rootPath = "value", maxChars = Number.POSITIVE_INFINITY) {
      lastFailure = undefined;
      return encodeFast(value, rootPath, maxChars);
    },
    threw(error) {
      return error !== undefined && error === lastFailure;
    },
    refused(error) {
      return error !== null && typeof error === "object" && weakHas(failures, error);
    },
    decode(text) {
      // Text marked plain holds no tags: nothing to revive. (A guest marking its own text so
      // only keeps tags from being revived: its values stay inert data.)
      return charCodeOf(text, 0) === 32 ? parse(text) : revive(parse(text));
    },
    revive(tree) {
      return revive(tree);
    },
    encodeError(error, stacks = true, maxChars = Number.POSITIVE_INFINITY) {
      lastFailure = undefined;
      return encodeWith(error, "error", maxChars, true, stacks);
    },
    extend(next) {
      extension = next;
    },
    limitCopies(chars) {
      copyCeiling = chars;
    },
  };
}
