/**
 * The decoder: turns a parsed tree of tagged JSON back into values (codec.ts says the format).
 * It reads text only, never a guest's object, so it runs nothing of the guest's (security
 * invariant 2); an own "__proto__" key is defined as data, never assigned.
 *
 * The text may come from a side that did not use the encoder (a guest's crafted answer, a remote
 * client's inputText): anything the encoder would not write fails with ERR_NOT_SERIALIZABLE and
 * the path to it (a tag whose payload is the wrong kind, an unknown tag, bytes that are not
 * base64, nesting deeper than MAX_DECODE_DEPTH), never with an engine's bare TypeError or a stack
 * overflow, and never as a quietly different value.
 *
 * SELF-CONTAINED, like every part of the codec: it is stringified into guest realms (codec.ts).
 */
import type { CodecBuiltins } from "./codec-builtins.js";
import type { Base64 } from "./codec-base64.js";
import type { CodecFailures } from "./codec-failures.js";
import type { CodecState } from "./codec.js";

export function createDecoder(builtins: CodecBuiltins, base64: Base64, failures: CodecFailures, state: CodecState) {
  const {
    DateCtor,
    ErrorCtor,
    MAX_BIGINT_CHARS,
    LARGE_BIGINT_CHARS,
    MAX_LARGE_BIGINT_DIGITS,
    MAX_DECODE_DEPTH,
    MapCtor,
    SetCtor,
    StringCtor,
    bareArray,
    charCodeOf,
    defineProperty,
    errorCtors,
    hasOwn,
    isArray,
    mapSet,
    sliceOf,
    ownKeys,
    setAdd,
    stringify,
    typedCtors,
    trusted,
  } = builtins;
  /** V8's (the host's): how many frames a new Error captures. */
  const Errors = ErrorCtor as unknown as { stackTraceLimit?: number };
  const { fromBase64 } = base64;
  const { pathOf, refused, shown } = failures;
  // Annotated: TypeScript narrows after a call that never returns only through a declared type.
  const fail: CodecFailures["fail"] = failures.fail;

  /** What the decoded text is called in messages (`decode`'s rootPath). */
  let root = "value";
  /** Digits of this decode's BigInts longer than LARGE_BIGINT_CHARS so far (see codec-builtins.ts). */
  let largeDigits = 0;
  /**
   * trail[0..depth) are the keys that lead to the value at `depth` (pathOf in codec-failures.ts),
   * written as the walk goes down, read only for an error: one store per object, no string.
   */
  const trail = bareArray<string | number>();

  function malformed(depth: number, what: string): never {
    const path = pathOf(root, trail, depth);
    return fail("ERR_NOT_SERIALIZABLE", path, shown(path) + " " + what);
  }

  /** A container at `depth` (its children one deeper) must be within the bound the encoders keep. */
  function within(depth: number): void {
    if (depth >= MAX_DECODE_DEPTH) malformed(depth, "is nested deeper than " + MAX_DECODE_DEPTH + " levels");
  }

  /** The payload `v` of a tag, which must be a `kind` ("an array", ...) for the tag to be read. */
  function wrongPayload(depth: number, tag: string, kind: string): never {
    return malformed(depth, "is tagged " + stringify(tag) + ' but its "v" is not ' + kind + ", so it cannot be read");
  }

  /** A name from the text, as a message shows it: a guest's megabyte-long tag is cut. */
  function cut(text: string): string {
    return text.length > 40 ? sliceOf(text, 0, 40) + "…" : text;
  }

  /** Is `text` a decimal integer as the encoder writes one (BigInt() also reads hex, octal and spaces)? */
  function isDecimal(text: string): boolean {
    const start = charCodeOf(text, 0) === 45 ? 1 : 0;
    if (text.length === start) return false;
    for (let i = start; i < text.length; i++) {
      const c = charCodeOf(text, i);
      if (c < 48 || c > 57) return false;
    }
    return true;
  }

  /**
   * Turn a parsed tree into values, IN PLACE: trees come straight from JSON.parse, so plain
   * objects and arrays are reused and only tagged objects are replaced (half the allocation).
   * `depth` counts levels as the encoder does: each array, object, Map, Set, Error or extension
   * value is one, and a Map's entry pairs or an error's field record are not.
   */
  function revive(value: unknown, depth: number): unknown {
    if (value === null || typeof value !== "object") return value;
    if (isArray(value)) {
      within(depth);
      for (let i = 0; i < value.length; i++) {
        const item = value[i];
        if (item !== null && typeof item === "object") {
          trail[depth] = i;
          value[i] = revive(item, depth + 1);
        }
      }
      return value;
    }
    const tagged = value as Record<string, unknown>;
    if (!hasOwn(tagged, "$")) return reviveObject(tagged, depth);
    const tag = tagged.$;
    const v = tagged.v;
    switch (tag) {
      case "o":
        if (v === null || typeof v !== "object" || isArray(v)) wrongPayload(depth, "o", "an object");
        return reviveObject(v as Record<string, unknown>, depth);
      case "u":
        return undefined;
      case "n":
        // The numbers JSON cannot write, as the encoder writes them: anything else is not one.
        if (v === "-0") return -0;
        // Computed, not read from the global Number, which a guest may replace.
        if (v === "NaN") return 0 / 0;
        if (v === "Infinity") return 1 / 0;
        if (v === "-Infinity") return -1 / 0;
        return wrongPayload(depth, "n", '"NaN", "Infinity", "-Infinity" or "-0"');
      case "b":
        if (typeof v !== "string") return wrongPayload(depth, "b", "a decimal integer");
        // Reading a decimal BigInt takes time that grows faster than its length (1M digits: 120
        // ms here): text past the cap the encoder keeps is refused unread.
        if (v.length > MAX_BIGINT_CHARS) malformed(depth, "is a BigInt of more than " + MAX_BIGINT_CHARS + " digits");
        if (v.length > LARGE_BIGINT_CHARS) largeDigits += v.length;
        if (largeDigits > MAX_LARGE_BIGINT_DIGITS)
          malformed(
            depth,
            "is one BigInt too many: a value holds at most " +
              MAX_LARGE_BIGINT_DIGITS +
              " digits in BigInts of more than " +
              LARGE_BIGINT_CHARS +
              " digits",
          );
        if (!isDecimal(v)) wrongPayload(depth, "b", "a decimal integer");
        return BigInt(v);
      case "d":
        if (v !== null && typeof v !== "number") wrongPayload(depth, "d", "a number or null");
        return new DateCtor(v === null ? 0 / 0 : v);
      case "m":
        return reviveMap(v, depth);
      case "s": {
        if (!isArray(v)) wrongPayload(depth, "s", "an array");
        within(depth);
        // Filled through the captured `add`: the constructor would run the array iterator and `add`
        // as the realm has them now (a guest's, in a guest realm).
        const set = new SetCtor();
        for (let i = 0; i < v.length; i++) {
          trail[depth] = -3 * i - 3;
          setAdd(set, revive(v[i], depth + 1));
        }
        return set;
      }
      case "a": {
        const bytes = typeof v === "string" ? fromBase64(v) : undefined;
        if (bytes === undefined) return wrongPayload(depth, "a", "base64 text");
        return bytes.buffer;
      }
      case "t":
        return reviveView(tagged, depth);
      case "e":
        return reviveError(tagged, depth);
      default:
        return reviveExtended(tagged, depth);
    }
  }

  function reviveObject(value: Record<string, unknown>, depth: number): Record<string, unknown> {
    within(depth);
    const keys = ownKeys(value);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      const item = value[key];
      if (item === null || typeof item !== "object") continue;
      trail[depth] = key;
      const revived = revive(item, depth + 1);
      if (revived === item) continue;
      // An own "__proto__" key is data: define it, never assign it (assignment sets the prototype).
      if (key === "__proto__")
        defineProperty(value, key, { value: revived, enumerable: true, writable: true, configurable: true });
      else value[key] = revived;
    }
    return value;
  }

  function reviveMap(v: unknown, depth: number): Map<unknown, unknown> {
    if (!isArray(v)) wrongPayload(depth, "m", "an array of [key, value] pairs");
    within(depth);
    const map = new MapCtor();
    for (let i = 0; i < v.length; i++) {
      const entry = v[i];
      if (!isArray(entry) || entry.length !== 2)
        malformed(depth, 'is tagged "m" (a Map) but its entry ' + i + " is not a [key, value] pair");
      trail[depth] = -3 * i - 1;
      const key = revive(entry[0], depth + 1);
      trail[depth] = -3 * i - 2;
      mapSet(map, key, revive(entry[1], depth + 1));
    }
    return map;
  }

  function reviveView(tagged: Record<string, unknown>, depth: number): ArrayBufferView {
    const kind = tagged.t;
    if (typeof kind !== "string") return malformed(depth, 'is tagged "t" (a typed array) but its "t" names no kind');
    if (!hasOwn(typedCtors, kind))
      malformed(depth, "is tagged as a " + cut(kind) + ", but a " + cut(kind) + " cannot be read here (this realm has none)");
    const v = tagged.v;
    const bytes = typeof v === "string" ? fromBase64(v) : undefined;
    if (bytes === undefined) return wrongPayload(depth, "t", "base64 text");
    const ctor = typedCtors[kind];
    if (ctor === typedCtors.DataView) return new ctor(bytes.buffer);
    const size = ctor.BYTES_PER_ELEMENT as number;
    if (bytes.byteLength % size !== 0)
      malformed(
        depth,
        "is a " +
          kind +
          " of " +
          bytes.byteLength +
          (bytes.byteLength === 1 ? " byte" : " bytes") +
          ", not a whole number of " +
          size +
          "-byte elements",
      );
    return new ctor(bytes.buffer, 0, bytes.byteLength / size);
  }

  function reviveError(tagged: Record<string, unknown>, depth: number): Error {
    within(depth);
    const { n, m, s, a, f } = tagged;
    // What the encoder writes: a name and a message, a stack if any, a list, a record of fields.
    if (typeof n !== "string" || typeof m !== "string")
      malformed(depth, 'is tagged "e" (an Error) but has no string "n" (name) and "m" (message)');
    if (s !== undefined && typeof s !== "string") malformed(depth, 'is tagged "e" but its "s" (stack) is not a string');
    if (a !== undefined && !isArray(a)) malformed(depth, 'is tagged "e" but its "a" (errors) is not an array');
    if (f !== undefined && (f === null || typeof f !== "object" || isArray(f)))
      malformed(depth, 'is tagged "e" but its "f" (fields) is not an object');
    const name = n;
    const message = m;
    let error: Error;
    let errors: unknown[] | undefined;
    if (a !== undefined) {
      trail[depth] = "errors";
      errors = revive(a, depth + 1) as unknown[];
    }
    // The host's own codec captures no stack for an error whose stack is set below: in a deep
    // decode the capture cost ~13 µs an error, against ~1.6 µs without (530,000 tiny Errors in
    // a result held the host's loop 7.4 s). Not in a guest's realm, where the limit is the guest's.
    const aggregate = name === "AggregateError" && typeof AggregateError === "function";
    const limit = trusted ? Errors.stackTraceLimit : undefined;
    if (trusted) Errors.stackTraceLimit = 0;
    try {
      error = aggregate
        ? new AggregateError(errors ?? [], message)
        : new (hasOwn(errorCtors, name) ? errorCtors[name] : ErrorCtor)(message);
    } finally {
      if (trusted) Errors.stackTraceLimit = limit;
    }
    if (!aggregate) {
      if (error.name !== name) defineProperty(error, "name", { value: name, writable: true, configurable: true });
      // Any error's `errors` list crosses as "a", not only an AggregateError's.
      if (errors !== undefined)
        defineProperty(error, "errors", { value: errors, enumerable: true, writable: true, configurable: true });
    }
    defineProperty(error, "stack", {
      value: typeof s === "string" ? s : name + ": " + message,
      writable: true,
      configurable: true,
    });
    if (hasOwn(tagged, "c")) {
      trail[depth] = "cause";
      defineProperty(error, "cause", { value: revive(tagged.c, depth + 1), writable: true, configurable: true });
    }
    if (f !== undefined) {
      const fields = f as Record<string, unknown>;
      const keys = ownKeys(fields);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        trail[depth] = key;
        defineProperty(error, key, {
          value: revive(fields[key], depth + 1),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
    }
    return error;
  }

  /** A tag the extension owns (Request, Response, Headers), else refused: no tag is read as plain data. */
  function reviveExtended(tagged: Record<string, unknown>, depth: number): unknown {
    const tag = tagged.$;
    const shownTag = typeof tag === "string" ? stringify(cut(tag)) : "of type " + typeof tag;
    const extension = state.extension;
    if (extension === undefined) return malformed(depth, "has a tag (" + shownTag + ") this codec does not know");
    within(depth);
    let extended: unknown;
    try {
      // The extension's fields are one level down, named by their key.
      extended = extension.decode(tagged, (field, key = "$") => {
        trail[depth] = key;
        return revive(field, depth + 1);
      });
    } catch (error) {
      if (refused(error)) throw error;
      // The extension's own constructor refused a field (a header name, a URL): its message says which.
      let reason = "";
      try {
        reason = StringCtor((error as Error).message);
      } catch {}
      return malformed(depth, "is tagged " + shownTag + " but cannot be read: " + sliceOf(reason, 0, 200));
    }
    if (extended === undefined) return malformed(depth, "has a tag (" + shownTag + ") this codec does not know");
    return extended;
  }

  /** Revive a parsed tree; `rootPath` names it in errors. */
  return function reviveRoot(tree: unknown, rootPath: string): unknown {
    root = rootPath;
    largeDigits = 0;
    return revive(tree, 0);
  };
}
