/**
 * The decoder: turns a parsed tree of tagged JSON back into values (codec.ts says the format).
 * It reads text only, never a guest's object, so it runs nothing of the guest's (security
 * invariant 2); an own "__proto__" key is defined as data, never assigned.
 *
 * SELF-CONTAINED, like every part of the codec: it is stringified into guest realms (codec.ts).
 */
import type { CodecBuiltins } from "./codec-builtins.js";
import type { Base64 } from "./codec-base64.js";
import type { CodecFailures } from "./codec-failures.js";
import type { CodecState } from "./codec.js";

export function createDecoder(builtins: CodecBuiltins, base64: Base64, failures: CodecFailures, state: CodecState) {
  const {
    ArrayBufferCtor,
    DateCtor,
    ErrorCtor,
    MAX_BIGINT_CHARS,
    MapCtor,
    SetCtor,
    StringCtor,
    defineProperty,
    errorCtors,
    hasOwn,
    isArray,
    ownKeys,
    typedCtors,
  } = builtins;
  const { fromBase64 } = base64;
  // Annotated: TypeScript narrows after a call that never returns only through a declared type.
  const fail: CodecFailures["fail"] = failures.fail;

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
        const extended = state.extension?.decode(tagged, revive);
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

  return revive;
}
