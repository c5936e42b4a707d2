/**
 * How the codec refuses a value: errors with a stable `code` and the `path` of the value that
 * could not cross (`value.items[3].owner`), a message that says what it is, and a record of which
 * errors the codec itself threw (a guest can throw a look-alike from a getter the encoder runs).
 *
 * SELF-CONTAINED, like every part of the codec: it is stringified into guest realms (codec.ts).
 */
import type { CodecBuiltins } from "./codec-builtins.js";
import type { CodecState } from "./codec.js";

export function createCodecFailures(builtins: CodecBuiltins, state: CodecState) {
  /**
   * Levels below which a stack that ran out is not the walk's doing: QuickJS's runs out near 450
   * levels, V8's past the codec's own bound of 512. Shallower, what filled the stack was the
   * guest's (a getter recursing), or the guest threw a look-alike RangeError: its error.
   */
  const OVERFLOW_DEPTH = 64;
  const {
    TypeErrorCtor,
    defineProperty,
    getProto,
    hasOwn,
    IDENT,
    MAX_SHOWN_PATH,
    regExpExec,
    sliceOf,
    stringify,
    weakAdd,
    weakHas,
  } = builtins;
  /** The error the latest encode failed with (see `threw`). */
  let lastFailure: unknown;
  /** What the latest encode failed with when its walk was deep (see `overflowed`). */
  let deepFailure: unknown;
  /** Every error this codec failed with: a guest cannot make one (see `refused`). */
  const failures = new WeakSet<object>();

  function tooLargeToCopy(rootPath: string): string {
    return rootPath + " is too large to copy within the instance's memory limit (more than " + state.copyCeiling + " characters)";
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
    return sliceOf(path, 0, end) + "…(" + (path.length - 2 * end) + " characters)…" + sliceOf(path, path.length - end);
  }

  function child(path: string, key: string | number): string {
    if (typeof key === "number") return path + "[" + key + "]";
    return regExpExec(IDENT, key) !== null ? path + "." + key : path + "[" + stringify(key) + "]";
  }

  /**
   * The path `trail[0..length)` leads to from `rootPath`. A negative number in the trail is a Map
   * entry's key (-3i-1) or value (-3i-2), or a Set's item (-3i-3): no key or index is one. (A
   * NUL-prefixed string was, until a key that began with NUL was named as the codec's own segment:
   * `{"\0.admin": f}` failed as `value.admin`.) Built only for an error: one path per property
   * would dominate the cost of encoding and decoding.
   */
  function pathOf(rootPath: string, trail: ArrayLike<string | number>, length: number): string {
    let out = rootPath;
    for (let i = 0; i < length; i++) {
      const key = trail[i];
      if (typeof key !== "number" || key >= 0) out = child(out, key);
      else {
        const n = -key - 1;
        const kind = n % 3;
        const index = (n - kind) / 3;
        out += kind === 2 ? "<item " + index + ">" : "<entry " + index + ">." + (kind === 0 ? "key" : "value");
      }
    }
    return out;
  }

  function kindOf(value: unknown): string {
    if (typeof value === "function") return "a function";
    if (typeof value === "symbol") return "a symbol";
    if (value !== null && typeof value === "object") {
      try {
        const proto = getProto(value);
        const ctor = proto && hasOwn(proto, "constructor") ? proto.constructor : undefined;
        const name = typeof ctor === "function" && typeof ctor.name === "string" ? ctor.name : "";
        return name ? "an instance of " + name : "an object with a custom prototype";
      } catch {
        return "an object";
      }
    }
    return "a " + typeof value;
  }

  function notSerializable(path: string, value: unknown): never {
    const what = kindOf(value);
    const hint = typeof value === "function" ? "functions cannot cross between the host and the guest" : "only data crosses";
    return fail(
      "ERR_NOT_SERIALIZABLE",
      path,
      shown(path) +
        " is " +
        what +
        "; " +
        hint +
        " (JSON values, undefined, Date, Map, Set, typed arrays, ArrayBuffer, BigInt, Error)",
    );
  }

  return {
    fail,
    shown,
    child,
    pathOf,
    kindOf,
    notSerializable,
    tooLargeToCopy,
    /** An encode starts: no failure of its own yet. */
    forget(): void {
      lastFailure = undefined;
      deepFailure = undefined;
    },
    /** The walk was `depth` levels deep when `error` left it (the encoder tells). */
    noteDepth(error: unknown, depth: number): void {
      if (depth >= OVERFLOW_DEPTH) deepFailure = error;
    },
    /** See Codec.overflowed. */
    overflowed(error: unknown): boolean {
      return error !== undefined && error === deepFailure;
    },
    /** See Codec.threw. */
    threw(error: unknown): boolean {
      return error !== undefined && error === lastFailure;
    },
    /** See Codec.refused. */
    refused(error: unknown): boolean {
      return error !== null && typeof error === "object" && weakHas(failures, error);
    },
  };
}

export type CodecFailures = ReturnType<typeof createCodecFailures>;
