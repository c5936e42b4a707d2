/**
 * The encoder: walks a value and writes its tagged JSON text directly (codec.ts says the format),
 * charging every piece it writes against the output budget before it copies, and refusing what
 * cannot cross with the path that leads to it (codec-failures.ts).
 *
 * It runs where the value lives (a guest's values in the guest, under its limits), so it defends
 * against the value's own realm: builtins were captured before guest code (codec-builtins.ts),
 * loops are indexed (no guest-replaceable iterator), a builtin is known by its brand, not its
 * prototype, and text is joined with `+` of strings and numbers, never a template literal: QuickJS
 * compiles one to a call of String.prototype.concat, the guest's to replace (it rewrote its own
 * outcome as ERR_MEMORY_LIMIT).
 *
 * SELF-CONTAINED, like every part of the codec: it is stringified into guest realms (codec.ts).
 */
import type { CodecBuiltins } from "./codec-builtins.js";
import type { Base64 } from "./codec-base64.js";
import type { CodecFailures } from "./codec-failures.js";
import type { CodecExtension, CodecState } from "./codec.js";

export function createEncoder(builtins: CodecBuiltins, base64: Base64, failures: CodecFailures, state: CodecState) {
  const {
    BRAND_ERROR,
    BRAND_PROTOS,
    ErrorProto,
    MAX_BIGINT_BITS,
    MAX_BIGINT_CHARS,
    LARGE_BIGINT_CHARS,
    MAX_LARGE_BIGINT_DIGITS,
    MAX_DEPTH,
    NumberIsFinite,
    ObjectProto,
    StringCtor,
    Uint8,
    setPrototypeOf,
    bareArray,
    byteLengthOf,
    charCodeOf,
    dateGetTime,
    getProto,
    hasOwn,
    inherits,
    isArray,
    isView,
    mapForEach,
    mapSize,
    ownKeys,
    setForEach,
    setSize,
    sliceOf,
    stringify,
    typedArrayTag,
    typedCtors,
    typedLength,
    viewParts,
  } = builtins;
  const { toBase64 } = base64;
  const { fail, shown, kindOf, notSerializable, tooLargeToCopy, noteDepth } = failures;
  const pathFrom = failures.pathOf;

  /** Characters jsonLength copies at a time. */
  const LENGTH_CHUNK = 65_536;

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

  // One encode's state. The walk's functions are made once, here, not per encode: in QuickJS
  // (an interpreter) making a dozen closures over a call's locals was most of the cost of a small
  // object (encode({n:1}): ~30 µs). An encode can start inside another (a getter that logs: the
  // console encodes its arguments), so encodeWith saves the state it replaces and restores it.
  let rootPath = "value";
  let maxChars = Number.POSITIVE_INFINITY;
  let lenient = false;
  let stacks = true;
  let capped = false;
  let budget = 0;
  /** Digits of this encode's BigInts longer than LARGE_BIGINT_CHARS so far. */
  let largeDigits = 0;
  // The objects being walked (for cycles) and the keys that led to the current value (see
  // `pathOf` in codec-failures.ts for what a negative number in it is). No try/finally pops
  // them: a throw leaves the whole encode, and the next one starts them empty.
  let stack = bareArray<unknown>();
  let trail = bareArray<string | number>();
  /** Encodes under way: one inside another gets arrays of its own. */
  let active = 0;
  /**
   * Keys' JSON text, by key: JSON.stringify took QuickJS ~1 µs a key, a lookup here ~0.15, and
   * a handler's results repeat their keys. No prototype (a "__proto__" key is an ordinary one
   * here); short keys only and a bounded count, emptied when full, so it holds little.
   */
  let keyTexts = setPrototypeOf({}, null) as Record<string, string>;
  let keyCount = 0;
  const KEY_CACHE_MAX = 512;
  const KEY_CACHE_LENGTH = 64;

  /**
   * Walk `root` and write its tagged JSON text directly. JSON.stringify is applied to strings
   * only: it would call a guest-defined `toJSON` on objects and let a guest forge tags.
   */
  function encodeWith(root: unknown, path: string, limit: number, leniently: boolean, withStacks = true): string {
    const saved = active === 0 ? undefined : [rootPath, maxChars, lenient, stacks, capped, budget, stack, trail, largeDigits];
    const copyCeiling = state.copyCeiling;
    rootPath = path;
    maxChars = limit;
    lenient = leniently;
    stacks = withStacks;
    capped = copyCeiling < limit;
    budget = capped ? copyCeiling : limit;
    largeDigits = 0;
    if (saved === undefined) {
      stack.length = 0;
      trail.length = 0;
    } else {
      stack = bareArray<unknown>();
      trail = bareArray<string | number>();
    }
    active++;
    try {
      return walk(root);
    } catch (error) {
      // The stack is not popped on a throw: its length is the depth the error left the walk at.
      noteDepth(error, stack.length);
      throw error;
    } finally {
      active--;
      if (saved !== undefined) {
        rootPath = saved[0] as string;
        maxChars = saved[1] as number;
        lenient = saved[2] as boolean;
        stacks = saved[3] as boolean;
        capped = saved[4] as boolean;
        budget = saved[5] as number;
        stack = saved[6] as unknown[];
        trail = saved[7] as (string | number)[];
        largeDigits = saved[8] as number;
      }
    }
  }

  function pathOf(): string {
    return pathFrom(rootPath, trail, trail.length);
  }

  function largeBigIntRule(): string {
    return (
      "a value holds at most " + MAX_LARGE_BIGINT_DIGITS + " digits in BigInts of more than " + LARGE_BIGINT_CHARS + " digits"
    );
  }

  function spend(n: number): void {
    budget -= n;
    if (budget >= 0) return;
    if (capped) fail("ERR_MEMORY_LIMIT", pathOf(), tooLargeToCopy(rootPath));
    fail("ERR_OUTPUT_TOO_LARGE", pathOf(), rootPath + " is larger than the limit of " + maxChars + " bytes");
  }

  function str(text: string): string {
    return stringify(StringCtor(text)) as string;
  }

  /**
   * `text` as a JSON string, charged at its written length (+ `extra`). Escapes make the copy up
   * to six times the text (a control character is `\u0001`): when that worst case would pass
   * what is left, the written length is counted before copying (found by review: a string of
   * control characters under the copy ceiling aborted the in-process host); else the copy is
   * made and charged as it is.
   */
  function quoted(text: string, extra = 0): string {
    const worst = text.length * 6 + 2 + extra > budget;
    // Over even unescaped: refused without counting (spend throws).
    if (worst) spend(text.length + 2 + extra > budget ? text.length + 2 + extra : jsonLength(text, budget) + extra);
    // Always a string here (a key, or a value typeof says is one): no String() needed.
    const out = stringify(text) as string;
    if (!worst) spend(out.length + extra);
    return out;
  }

  /**
   * `quoted(key, 1)` for an object's key, from the cache when it is there: the same text, charged
   * the same; the worst case (a budget nearly spent) is left to `quoted`, which counts first.
   */
  function quotedKey(key: string): string {
    if (key.length * 6 + 3 > budget) return quoted(key, 1);
    let out = keyTexts[key];
    if (out === undefined) {
      out = stringify(key) as string;
      if (key.length <= KEY_CACHE_LENGTH) {
        if (keyCount >= KEY_CACHE_MAX) {
          keyTexts = setPrototypeOf({}, null) as Record<string, string>;
          keyCount = 0;
        }
        keyTexts[key] = out;
        keyCount++;
      }
    }
    budget -= out.length + 1;
    if (budget < 0) spend(0);
    return out;
  }

  /** Walk a child value at `key` (a name, an index, or a negative number: see `trail`). */
  function at(value: unknown, key: string | number): string {
    const n = trail.length;
    trail[n] = key;
    const out = walk(value);
    trail.length = n;
    return out;
  }

  /**
   * `walk` for a value whose key is on the trail already: the common primitives written here,
   * charged as `walk` charges them, to spare an interpreter two calls a property.
   */
  function child(value: unknown): string {
    switch (typeof value) {
      case "string":
        return quoted(value);
      case "number":
        if (NumberIsFinite(value) && !(value === 0 && 1 / value < 0)) {
          budget -= 8;
          if (budget < 0) spend(0);
          return "" + value;
        }
        return walk(value);
      case "boolean":
        budget -= 5;
        if (budget < 0) spend(0);
        return value ? "true" : "false";
      default:
        return walk(value);
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
        return '{"$":"n","v":"' + (value === 0 ? "-0" : StringCtor(value)) + '"}';
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
          fail("ERR_NOT_SERIALIZABLE", path, shown(path) + " is a BigInt of more than " + MAX_BIGINT_CHARS + " digits");
        }
        if (digits.length > LARGE_BIGINT_CHARS) largeDigits += digits.length;
        if (largeDigits > MAX_LARGE_BIGINT_DIGITS) {
          const path = pathOf();
          fail("ERR_NOT_SERIALIZABLE", path, shown(path) + " is one BigInt too many: " + largeBigIntRule());
        }
        spend(digits.length + 16);
        return '{"$":"b","v":"' + digits + '"}';
      }
      case "object":
        break;
      default:
        if (lenient) return str("[not serializable: " + kindOf(value) + "]");
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
      fail("ERR_NOT_SERIALIZABLE", path, shown(path) + " is a circular reference; only trees of data can cross");
    }
    if (stack.length >= MAX_DEPTH) {
      const path = pathOf();
      fail("ERR_NOT_SERIALIZABLE", path, shown(path) + " is nested deeper than " + MAX_DEPTH + " levels");
    }
    const depth = stack.length;
    stack[depth] = value;
    const out = walkObject(value as object);
    stack.length = depth;
    return out;
  }

  function walkObject(value: object): string {
    if (isArray(value)) {
      const length = (value as unknown[]).length;
      spend(2 + length);
      let out = "[";
      for (let i = 0; i < length; i++) out += (i ? "," : "") + at((value as unknown[])[i], i);
      return out + "]";
    }
    const proto = getProto(value);
    if (proto === ObjectProto || proto === null) return walkPlain(value);
    if (isView(value)) {
      const tag = typedArrayTag(value) ?? "DataView";
      // Only the kinds every realm has: the host (Node 20) has no Float16Array, and revived as
      // raw bytes one came back a Uint8Array.
      if (!hasOwn(typedCtors, tag)) {
        if (lenient) return str("[not serializable: a " + tag + "]");
        const path = pathOf();
        fail(
          "ERR_NOT_SERIALIZABLE",
          path,
          shown(path) + " is a " + tag + ", a kind of typed array that does not cross (the others do)",
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
      return '{"$":"t","t":"' + tag + '","v":"' + toBase64(bytes) + '"}';
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
    // A chain no builtin brand knows: the extension's classes (Request, Response, Headers) are
    // asked first. Its checks are its own state, cheap; each brand check below throws on a
    // mismatch, and a returned Headers cost ~55 µs of those throws. No object is both.
    if (likely < 0) {
      const out = extendedOrUndefined(value);
      if (out !== undefined) return out;
    }
    // No chain or a lying one (a Map given Set.prototype, a Proxy): every brand, each may throw.
    for (let brand = 0; brand < BRAND_ERROR; brand++) {
      if (brand === likely) continue;
      const out = branded(brand, value);
      if (out !== undefined) return out;
    }
    // Not `instanceof`: it asks Error[Symbol.hasInstance], the guest's to define.
    if (inherits(ErrorProto, value)) return encodeErrorValue(value as Error);
    const out = likely < 0 ? undefined : extendedOrUndefined(value);
    if (out !== undefined) return out;
    if (lenient) return str("[not serializable: " + kindOf(value) + "]");
    return notSerializable(pathOf(), value);
  }

  /** The extension's refusal of the value at hand (a bound it keeps per crossing): the codec's own, with its path. */
  function refuseExtended(reason: string): never {
    const path = pathOf();
    return fail("ERR_NOT_SERIALIZABLE", path, shown(path) + " " + reason);
  }

  /** `value` in the extension's tagged form, or undefined when the extension does not own it. */
  function extendedOrUndefined(value: object): string | undefined {
    let extended: ReturnType<CodecExtension["encode"]>;
    try {
      extended = state.extension?.encode(value, refuseExtended);
    } catch (error) {
      // A Request or Response with no body to send (read already, or never read where bodies
      // are): in an error's fields it is described, as any field that cannot cross is.
      if (lenient) return str("[not serializable: " + kindOf(value) + "]");
      throw error;
    }
    return extended === undefined ? undefined : walkTagged(extended);
  }

  /**
   * A buffer whose memory was transferred away (structuredClone's transfer, `transfer()`), or a
   * view on one: viewing it throws. Its engine's TypeError named no path and no code.
   */
  function detached(what: string): string {
    if (lenient) return str("[not serializable: " + what + "]");
    const path = pathOf();
    return fail("ERR_NOT_SERIALIZABLE", path, shown(path) + " is " + what + "; its bytes are gone");
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
      return '{"$":"a","v":"' + toBase64(bytes) + '"}';
    }
    if (brand === 1) {
      let time: number | undefined;
      try {
        time = dateGetTime(value);
      } catch {}
      if (time === undefined) return undefined;
      spend(24);
      return '{"$":"d","v":' + (NumberIsFinite(time) ? StringCtor(time) : "null") + "}";
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
        out += (i ? ",[" : "[") + at(k, -3 * i - 1) + "," + at(v, -3 * i - 2) + "]";
        i++;
      });
      return '{"$":"m","v":[' + out + "]}";
    }
    spend(8 + size * 2);
    setForEach(value, (v) => {
      out += (i ? "," : "") + at(v, -3 * i - 3);
      i++;
    });
    return '{"$":"s","v":[' + out + "]}";
  }

  function walkPlain(value: object): string {
    const keys = ownKeys(value);
    const count = keys.length;
    spend(2 + count * 2);
    let out = "";
    let escaped = false;
    const n = trail.length;
    // Every key loop is indexed: `for…of` runs Array.prototype[Symbol.iterator], which a guest
    // can replace to yield an object whose toString says "$" (it is not === "$", so the object
    // was not escaped, and a Date, Map or BigInt came out of plain data).
    for (let i = 0; i < count; i++) {
      const key = keys[i];
      if (key === "$") escaped = true;
      // The key is charged at the parent's path, its value at the key's (as `at` would). Joined
      // with `+`: QuickJS makes a template literal a call to String.prototype.concat (~3x the
      // cost, and a method the guest can replace).
      const text = quotedKey(key);
      const item = (value as Record<string, unknown>)[key];
      trail[n] = key;
      out = (i ? out + "," : out) + text + ":" + child(item);
      trail.length = n;
    }
    // A plain object with its own "$" key is escaped, so no guest value can forge a tag.
    return escaped ? '{"$":"o","v":{' + out + "}}" : "{" + out + "}";
  }

  /** An extension's tagged form: its fields are data the codec encodes like any other. */
  function walkTagged(tagged: Record<string, unknown>): string {
    let out = '"$":' + str(StringCtor(tagged.$));
    const keys = ownKeys(tagged);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      if (key !== "$") out += "," + str(key) + ":" + at(tagged[key], key);
    }
    return "{" + out + "}";
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
      let out = '"$":"e","n":' + quoted(name, 8) + ',"m":' + quoted(message, 5);
      if (typeof stackText === "string") out += ',"s":' + quoted(stackText, 5);
      if (hasOwn(error, "cause")) out += ',"c":' + at((error as { cause?: unknown }).cause, "cause");
      const nested = (error as { errors?: unknown }).errors;
      const listed = isArray(nested);
      if (listed) out += ',"a":' + at(nested, "errors");
      let fields = "";
      const keys = ownKeys(error);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (key === "stack" || key === "message" || key === "cause" || (key === "errors" && listed)) continue;
        fields += (fields ? "," : "") + str(key) + ":" + at((error as unknown as Record<string, unknown>)[key], key);
      }
      if (fields) out += ',"f":{' + fields + "}";
      return "{" + out + "}";
    } finally {
      lenient = saved;
    }
  }

  /** Is an encode under way (this one starts inside it: a getter that logs or calls the host)? */
  function nested(): boolean {
    return active > 0;
  }

  return { encodeWith, jsonLength, nested };
}

export type Encoder = ReturnType<typeof createEncoder>;
