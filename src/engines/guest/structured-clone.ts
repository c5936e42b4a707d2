/**
 * `structuredClone` for the v8 and quickjs guest realms: the HTML structured clone algorithm
 * (serialize then deserialize, done in one walk), as Deno and browsers have it. It copies within
 * the guest's own heap, so the guest's memory and time limits bound it.
 *
 * Before, it was a round trip through cordon's value codec, which has the rules of a boundary,
 * not of a clone: cycles and shared references were refused or split, a RegExp refused,
 * `transfer` ignored, a Response copied, and failures were TypeErrors, not DataCloneErrors
 * (found by review, against Deno).
 *
 * SELF-CONTAINED: injected as `createStructuredClone.toString()` into the guest realm before any
 * guest code runs; builtins are captured here, and nothing below looks a method up on a value
 * the guest could have patched, except where the algorithm itself reads the guest's properties.
 */
export function createStructuredClone(
  /** Objects of the runtime's own classes (Request, Headers, URL, ...): not serializable, as in browsers. */
  isPlatformObject: (value: object) => boolean,
): (value: unknown, options?: unknown) => unknown {
  const call = Function.prototype.call;
  const uncurry = <T, A extends unknown[], R>(fn: (this: T, ...args: A) => R) =>
    call.bind(fn) as unknown as (self: T, ...args: A) => R;
  const getOwnDesc = Reflect.getOwnPropertyDescriptor;
  const getter = (proto: object, key: PropertyKey) => uncurry(getOwnDesc(proto, key)?.get as (this: unknown) => unknown);

  const ErrorCtor = Error;
  const ObjectCtor = Object;
  const SymbolIterator: typeof Symbol.iterator = Symbol.iterator;
  const objectCreate = Object.create;
  const defineProperty = Object.defineProperty;
  const getPrototypeOf = Object.getPrototypeOf;
  const objectKeys = Object.keys;
  const hasOwn = uncurry(Object.prototype.hasOwnProperty) as (o: object, k: PropertyKey) => boolean;
  const isArray = Array.isArray;
  const ErrorProto = Error.prototype;
  const inherits = uncurry(Object.prototype.isPrototypeOf) as (proto: object, value: unknown) => boolean;
  const deleteProperty = Reflect.deleteProperty;
  const tagOf = uncurry(Object.prototype.toString) as (v: unknown) => string;
  const MapCtor = Map;
  const SetCtor = Set;
  const DateCtor = Date;
  const RegExpCtor = RegExp;
  const DataViewCtor = DataView;
  const ArrayCtor = Array;
  const mapGet = uncurry(Map.prototype.get);
  const mapSet = uncurry(Map.prototype.set);
  const mapHas = uncurry(Map.prototype.has);
  const mapForEach = uncurry(Map.prototype.forEach) as (m: Map<unknown, unknown>, f: (v: unknown, k: unknown) => void) => void;
  const mapSize = getter(Map.prototype, "size");
  const setAdd = uncurry(Set.prototype.add);
  const setForEach = uncurry(Set.prototype.forEach) as (s: Set<unknown>, f: (v: unknown) => void) => void;
  const setSize = getter(Set.prototype, "size");
  const dateGetTime = uncurry(Date.prototype.getTime);
  const regexpSource = getter(RegExp.prototype, "source") as (r: unknown) => string;
  const regexpFlags = getter(RegExp.prototype, "flags") as (r: unknown) => string;
  const abByteLength = getter(ArrayBuffer.prototype, "byteLength") as (v: unknown) => number;
  const abSlice = uncurry(ArrayBuffer.prototype.slice) as (v: ArrayBuffer, start: number, end: number) => ArrayBuffer;
  const abTransfer = (ArrayBuffer.prototype as { transfer?: () => ArrayBuffer }).transfer;
  // Newer engines only (QuickJS has it; the V8 of Node 20 has neither `detached` nor `transfer`).
  const abDetached = getOwnDesc(ArrayBuffer.prototype, "detached")?.get
    ? (getter(ArrayBuffer.prototype, "detached") as (v: unknown) => boolean)
    : undefined;
  const TypedArrayProto = getPrototypeOf(Uint8Array.prototype) as object;
  const taTag = getter(TypedArrayProto, Symbol.toStringTag) as (v: unknown) => string | undefined;
  const taBuffer = getter(TypedArrayProto, "buffer") as (v: unknown) => ArrayBuffer;
  const taByteOffset = getter(TypedArrayProto, "byteOffset") as (v: unknown) => number;
  const taLength = getter(TypedArrayProto, "length") as (v: unknown) => number;
  const dvBuffer = getter(DataView.prototype, "buffer") as (v: unknown) => ArrayBuffer;
  const dvByteOffset = getter(DataView.prototype, "byteOffset") as (v: unknown) => number;
  const dvByteLength = getter(DataView.prototype, "byteLength") as (v: unknown) => number;
  const valueOfs: Record<string, (v: unknown) => unknown> = objectCreate(null);
  valueOfs["[object Boolean]"] = uncurry(Boolean.prototype.valueOf);
  valueOfs["[object Number]"] = uncurry(Number.prototype.valueOf);
  valueOfs["[object String]"] = uncurry(String.prototype.valueOf);
  valueOfs["[object BigInt]"] = uncurry(BigInt.prototype.valueOf);
  const g = globalThis as unknown as Record<string, unknown>;
  const typedArrays: Record<string, new (b: ArrayBuffer, o: number, l: number) => unknown> = objectCreate(null);
  for (const name of [
    "Int8Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "BigInt64Array",
    "BigUint64Array",
  ]) {
    if (typeof g[name] === "function") typedArrays[name] = g[name] as (typeof typedArrays)[string];
  }
  const errorCtors: Record<string, ErrorConstructor> = objectCreate(null);
  errorCtors.Error = Error;
  errorCtors.EvalError = EvalError;
  errorCtors.RangeError = RangeError;
  errorCtors.ReferenceError = ReferenceError;
  errorCtors.SyntaxError = SyntaxError;
  errorCtors.TypeError = TypeError;
  errorCtors.URIError = URIError;

  // The realm's DOMException (dom-exception.ts installs one), captured before guest code runs.
  const DOMExceptionCtor = (globalThis as { DOMException?: new (message: string, name: string) => Error }).DOMException;

  /** A DOMException named DataCloneError, as Node throws; without one, an Error with its name and code. */
  function dataCloneError(message: string): Error {
    if (typeof DOMExceptionCtor === "function") return new DOMExceptionCtor(message, "DataCloneError");
    const error = new ErrorCtor(message);
    define(error, "name", "DataCloneError", false);
    define(error, "code", 25, false);
    return error;
  }

  /**
   * Defines a property from a null-prototype descriptor: one made as a literal inherits `get`,
   * `set` or `value` a guest put on Object.prototype.
   */
  function define(target: object, key: PropertyKey, value: unknown, enumerable: boolean): void {
    const d = objectCreate(null) as PropertyDescriptor;
    d.value = value;
    d.writable = true;
    d.enumerable = enumerable;
    d.configurable = true;
    defineProperty(target, key, d);
  }

  function data(target: object, key: PropertyKey, value: unknown): void {
    define(target, key, value, true);
  }

  /** A method of the brand `tag` names, or undefined when the object does not have that brand (a spoofed tag). */
  function confirm<T>(read: (v: unknown) => T, value: unknown): { value: T } | undefined {
    try {
      return { value: read(value) };
    } catch {
      return undefined;
    }
  }

  return function structuredClone(value: unknown, options?: unknown): unknown {
    // memory: originals to their copies (the spec's memory map): shared references stay shared, cycles stay cycles.
    const memory = new MapCtor<unknown, unknown>();
    const transferred: ArrayBuffer[] = [];
    const transfer = options === undefined || options === null ? undefined : (options as { transfer?: unknown }).transfer;
    if (transfer !== undefined) {
      if (
        transfer === null ||
        typeof transfer !== "object" ||
        typeof (transfer as Iterable<unknown>)[SymbolIterator] !== "function"
      )
        throw new TypeError("structuredClone: options.transfer must be a sequence of objects");
      for (const item of transfer as Iterable<unknown>) {
        // Node's TypeError, for a primitive (not an object, as WebIDL requires) and for an object
        // it cannot transfer alike.
        if (confirm(abByteLength, item) === undefined)
          throw new TypeError("structuredClone: only ArrayBuffers can be transferred here");
        if (mapHas(memory, item)) throw dataCloneError("structuredClone: an ArrayBuffer is listed twice in transfer");
        if (abDetached?.(item)) throw dataCloneError("structuredClone: a detached ArrayBuffer cannot be transferred");
        if (abTransfer === undefined)
          throw dataCloneError("structuredClone: this engine cannot transfer (detach) an ArrayBuffer; clone without transfer");
        mapSet(memory, item, undefined);
        transferred[transferred.length] = item as ArrayBuffer;
      }
    }
    const copy = clone(value);
    // Detached only once the whole clone succeeded, as the spec does.
    for (let i = 0; i < transferred.length; i++) call.call(abTransfer as () => ArrayBuffer, transferred[i]);
    return copy;

    function clone(input: unknown): unknown {
      if (input === null || (typeof input !== "object" && typeof input !== "function")) {
        if (typeof input === "symbol") throw dataCloneError("structuredClone: a Symbol cannot be cloned");
        return input;
      }
      if (mapHas(memory, input)) {
        const known = mapGet(memory, input);
        // A buffer listed in transfer: its contents move into the copy.
        if (known !== undefined) return known;
        const moved = abSlice(input as ArrayBuffer, 0, abByteLength(input));
        mapSet(memory, input, moved);
        return moved;
      }
      if (typeof input === "function") throw dataCloneError("structuredClone: a function cannot be cloned");
      if (isPlatformObject(input)) throw dataCloneError(`structuredClone: ${tagOf(input)} cannot be cloned`);
      const typed = taTag(input);
      if (typed !== undefined) return cloneView(input, typed);
      const tag = tagOf(input);
      switch (tag) {
        case "[object Boolean]":
        case "[object Number]":
        case "[object String]":
        case "[object BigInt]": {
          const primitive = confirm(valueOfs[tag], input);
          if (primitive === undefined) break;
          const boxed = ObjectCtor(primitive.value);
          mapSet(memory, input, boxed);
          return boxed;
        }
        case "[object Date]": {
          const time = confirm(dateGetTime, input);
          if (time === undefined) break;
          const date = new DateCtor(time.value);
          mapSet(memory, input, date);
          return date;
        }
        case "[object RegExp]": {
          const source = confirm(regexpSource, input);
          if (source === undefined) break;
          const regexp = new RegExpCtor(source.value, regexpFlags(input));
          mapSet(memory, input, regexp);
          return regexp;
        }
        case "[object ArrayBuffer]": {
          const length = confirm(abByteLength, input);
          if (length === undefined) break;
          if (abDetached?.(input)) throw dataCloneError("structuredClone: a detached ArrayBuffer cannot be cloned");
          const buffer = abSlice(input as ArrayBuffer, 0, length.value);
          mapSet(memory, input, buffer);
          return buffer;
        }
        case "[object DataView]":
          if (confirm(dvByteLength, input) !== undefined) return cloneView(input, "DataView");
          break;
        case "[object Map]": {
          if (confirm(mapSize, input) === undefined) break;
          const map = new MapCtor();
          mapSet(memory, input, map);
          const entries: unknown[] = [];
          mapForEach(input as Map<unknown, unknown>, (v, k) => {
            entries[entries.length] = k;
            entries[entries.length] = v;
          });
          for (let i = 0; i < entries.length; i += 2) mapSet(map, clone(entries[i]), clone(entries[i + 1]));
          return map;
        }
        case "[object Set]": {
          if (confirm(setSize, input) === undefined) break;
          const set = new SetCtor();
          mapSet(memory, input, set);
          const items: unknown[] = [];
          setForEach(input as Set<unknown>, (v) => {
            items[items.length] = v;
          });
          for (let i = 0; i < items.length; i++) setAdd(set, clone(items[i]));
          return set;
        }
        case "[object Error]":
          // JavaScript has no check for an error's internal slot: a plain object whose
          // Symbol.toStringTag says "Error" (and that is no Error.prototype heir) is a plain object,
          // as Node clones it, not a made-up TypeError.
          if (!inherits(ErrorProto, input)) break;
          return cloneError(input as Error);
        case "[object Promise]":
        case "[object WeakMap]":
        case "[object WeakSet]":
        case "[object WeakRef]":
        case "[object FinalizationRegistry]":
        case "[object Symbol]":
          throw dataCloneError(`structuredClone: ${tag} cannot be cloned`);
      }
      if (isArray(input)) {
        const array = new ArrayCtor((input as unknown[]).length);
        mapSet(memory, input, array);
        return copyProperties(input, array);
      }
      const object = {};
      mapSet(memory, input, object);
      return copyProperties(input, object);
    }

    /** Own enumerable string keys, read with [[Get]] (getters run, as in the spec); symbols are not cloned. */
    function copyProperties(from: object, to: object): object {
      const keys = objectKeys(from);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (!hasOwn(from, key)) continue; // removed by an earlier getter
        data(to, key, clone((from as Record<string, unknown>)[key]));
      }
      return to;
    }

    function cloneView(view: unknown, kind: string): unknown {
      const isDataView = kind === "DataView";
      const buffer = clone(isDataView ? dvBuffer(view) : taBuffer(view)) as ArrayBuffer;
      const offset = isDataView ? dvByteOffset(view) : taByteOffset(view);
      const length = isDataView ? dvByteLength(view) : taLength(view);
      const Ctor = isDataView ? DataViewCtor : typedArrays[kind];
      if (Ctor === undefined) throw dataCloneError(`structuredClone: a ${kind} cannot be cloned here`);
      const copy = new Ctor(buffer, offset, length);
      mapSet(memory, view, copy);
      return copy;
    }

    function cloneError(error: Error): Error {
      // The spec keeps the name when it is one of the standard ones, else "Error".
      let name = "Error";
      try {
        const own = (error as { name?: unknown }).name;
        if (typeof own === "string" && errorCtors[own] !== undefined) name = own;
      } catch {}
      const Ctor = errorCtors[name];
      const copy = new Ctor();
      mapSet(memory, error, copy);
      // Only an own message is copied: without one, the copy inherits "" as the original does
      // (defining one with just `enumerable` made an own undefined, read-only and fixed).
      if (hasOwn(error, "message")) define(copy, "message", `${(error as { message: unknown }).message}`, false);
      // A stack that is not text (deleted, replaced) is not made up: the copy has none, as in Node.
      const stack = (error as { stack?: unknown }).stack;
      if (typeof stack === "string") define(copy, "stack", stack, false);
      else deleteProperty(copy, "stack");
      if (hasOwn(error, "cause")) define(copy, "cause", clone(error.cause), false);
      return copy;
    }
  };
}
