/**
 * The builtins the codec uses, captured once, when a codec is made: in a guest realm that is
 * before any guest code runs, so a guest that later replaces a prototype's method or getter
 * (Function.prototype.call, Map.prototype.size, RegExp.prototype.exec) changes nothing the
 * codec reports about its values.
 *
 * SELF-CONTAINED, like every part of the codec: it is stringified into guest realms (codec.ts).
 */
/** `trusted` is the host's own codec: it allows a few more levels of nesting (MAX_DEPTH). */
export function captureCodecBuiltins(trusted: boolean) {
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
  /** `value instanceof C` as `inherits(C.prototype, value)`, without the guest's Symbol.hasInstance. */
  const inherits = uncurry(ObjectProto.isPrototypeOf) as (proto: object, value: unknown) => boolean;
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
  const mapSet = uncurry(Map.prototype.set) as (map: unknown, key: unknown, value: unknown) => void;
  const setAdd = uncurry(Set.prototype.add) as (set: unknown, value: unknown) => void;
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
  /**
   * The deepest nesting a decode reads, in both realms: what either side's encoder may write (the
   * host's is the deeper), so a value that was encoded always decodes. Deeper text is refused
   * (ERR_NOT_SERIALIZABLE), not walked until the stack overflows: text can come from a side
   * that did not use this encoder (a guest's crafted answer, a remote client's inputText).
   */
  const MAX_DECODE_DEPTH = 520;
  /** The most objects and arrays the host's codec decodes from one text (codec-containers.ts). */
  const MAX_CONTAINERS = 1_000_000;
  /** Longer paths are shortened in messages (`shown`). */
  const MAX_SHOWN_PATH = 120;
  /** BigInts cross as decimal text of at most this many characters (sign included). */
  const MAX_BIGINT_CHARS = 100_000;
  /**
   * BigInts of more than LARGE_BIGINT_CHARS digits hold at most MAX_LARGE_BIGINT_DIGITS digits
   * between them in one value. Their decimal text takes time that grows faster than its length
   * (a 100,000-digit one ~7 ms to write and ~3.5 ms to read on v8 here, and a process host writes
   * and reads a result twice): 160 of them in a 16 MB result held a shared process worker 2.8 s
   * (red team, 2026-12-06). Shorter ones cost about their length, as a string does.
   */
  const LARGE_BIGINT_CHARS = 10_000;
  const MAX_LARGE_BIGINT_DIGITS = 1_000_000;
  /** 2 ** 332193 has 100,001 digits (2 ** 332192 has 100,000): a BigInt this many bits long is over the cap. */
  const MAX_BIGINT_BITS = 332_193n;
  const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
  // Matched with the exec of now: `test` calls the live `exec`, which a guest can replace.
  const regExpExec = uncurry(RegExp.prototype.exec) as (re: RegExp, text: string) => RegExpExecArray | null;
  const weakAdd = uncurry(WeakSet.prototype.add) as (set: WeakSet<object>, value: object) => void;
  const weakHas = uncurry(WeakSet.prototype.has) as (set: WeakSet<object>, value: unknown) => boolean;
  // A plain object, read only at creation: each part copies what it uses into its own closure.
  return {
    ObjectProto,
    ArrayProto,
    getProto,
    ownKeys,
    uncurry,
    applyFn,
    hasOwn,
    inherits,
    charCodeOf,
    sliceOf,
    Uint8,
    defineProperty,
    setPrototypeOf,
    bareArray,
    isArray,
    stringify,
    parse,
    StringCtor,
    NumberIsFinite,
    fromCharCode,
    ArrayBufferCtor,
    isView,
    byteLengthOf,
    typedArrayTag,
    viewParts,
    typedLength,
    dateGetTime,
    DateCtor,
    MapCtor,
    SetCtor,
    mapSize,
    setSize,
    mapForEach,
    setForEach,
    mapSet,
    setAdd,
    ErrorCtor,
    BRAND_PROTOS,
    BRAND_ERROR,
    ErrorProto,
    TypeErrorCtor,
    errorCtors,
    typedCtors,
    MAX_DEPTH,
    MAX_DECODE_DEPTH,
    MAX_CONTAINERS,
    MAX_SHOWN_PATH,
    MAX_BIGINT_CHARS,
    LARGE_BIGINT_CHARS,
    MAX_LARGE_BIGINT_DIGITS,
    MAX_BIGINT_BITS,
    IDENT,
    regExpExec,
    weakAdd,
    weakHas,
    trusted,
  };
}

export type CodecBuiltins = ReturnType<typeof captureCodecBuiltins>;
