/**
 * The value codec: the one way data crosses between the host and a guest, in both directions.
 *
 * Values are encoded to tagged JSON text. Plain JSON values stay as they are; everything else
 * is an object with a "$" tag (`{"$":"d","v":0}` is a Date). A plain object that has its own
 * "$" key is escaped as `{"$":"o","v":{...}}`, so no guest value can forge a tag.
 *
 * The host only ever decodes text: it never reads a guest object, runs a getter, a Proxy trap,
 * `toString` or a thenable (security invariant 2). Encoding runs in the guest, under its limits.
 *
 * This file is the entry: the codec's interface, and the assembly of its parts, one concept a
 * file: the captured builtins (codec-builtins.ts), base64 (codec-base64.ts), refusals and their
 * paths (codec-failures.ts), the encoder's walk (codec-encode.ts) and fast path
 * (codec-fast-path.ts), and the decoder (codec-decode.ts). Every part and `assembleCodec` are
 * SELF-CONTAINED on purpose: engines inject `codecSource()`, their stringified text, into the
 * guest realm, so the guest encodes with exactly the code the host decodes with. None may
 * reference anything outside its own body (no imports but types, no module-level values): what
 * a part needs comes in through its parameters. Nor may any use a template literal (see the top
 * of codec-encode.ts): text is joined with `+`.
 */
import { createBase64 } from "./codec-base64.js";
import { captureCodecBuiltins } from "./codec-builtins.js";
import { createContainerWeight } from "./codec-containers.js";
import { createDecoder } from "./codec-decode.js";
import { createEncoder } from "./codec-encode.js";
import { createFastPath } from "./codec-fast-path.js";
import { createCodecFailures } from "./codec-failures.js";

export interface Codec {
  /**
   * Encode `value` to text; throws a TypeError with `code` ERR_NOT_SERIALIZABLE naming the path.
   * `stacks: false` leaves errors' stacks out: for what the host sends a guest (host frames and
   * paths never reach a guest). `continuing`: this value crosses with the one encoded before it
   * (a result's exports with its value), so what the extension counts per crossing goes on.
   * An encode inside another (a getter that logs) continues the outer's count too.
   */
  encode(value: unknown, rootPath?: string, maxChars?: number, stacks?: boolean, continuing?: boolean): string;
  /**
   * `encode` when it needs no walk (a primitive, or plain JSON data in the host's codec), else
   * undefined. Plain data holds no Request or Response, so a caller can skip looking for bodies.
   */
  encodeFast(value: unknown, rootPath?: string, maxChars?: number): string | undefined;
  /**
   * Decode text; throws a TypeError with `code` ERR_NOT_SERIALIZABLE naming the path (from
   * `rootPath`) when the text is not what an encoder writes: not JSON, a malformed or unknown tag,
   * nesting past the bound the encoders keep; in the host's codec, more objects and arrays than
   * `weigh` allows.
   */
  decode(text: string, rootPath?: string, allowance?: number): unknown;
  /**
   * In the host's codec (`trusted`): throw as `decode` would for text of more objects and arrays
   * than one value may cross with (codec-containers.ts), plus `allowance` for an envelope around
   * it; `decode` weighs its text so itself. A guest's codec weighs nothing.
   */
  weigh(text: string, rootPath?: string, allowance?: number): void;
  /**
   * Decode an already-parsed tree (saves a second JSON.parse when the text was parsed for
   * framing). `continuing` as for `encode`: the tree crosses with the one revived before it.
   */
  revive(tree: unknown, rootPath?: string, continuing?: boolean): unknown;
  /** Encode an error leniently: fields that cannot cross are described, never fatal. `stacks` as for `encode`. */
  encodeError(error: unknown, stacks?: boolean, maxChars?: number): string;
  /**
   * Did this codec's latest encode fail with `error`? A guest can throw a look-alike (an object
   * with `code: "ERR_OUTPUT_TOO_LARGE"`) from a getter the encoder runs; only the codec's own
   * failure is one.
   */
  threw(error: unknown): boolean;
  /**
   * Did this codec's latest encode fail with `error` while its walk was deep? The engine's stack
   * running out there is the value's nesting; the same error (or a look-alike a guest threw from a
   * getter) near the top is the guest's. Told by the depth the codec itself tracks, never by the
   * error's name or message.
   */
  overflowed(error: unknown): boolean;
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
  /**
   * A tagged plain object for values this extension owns, else undefined. `refuse` fails the
   * encode as the codec's own refusal (ERR_NOT_SERIALIZABLE at this value's path, `reason` after
   * it): for a bound the extension keeps per crossing (how many messages, header entries).
   */
  encode(value: object, refuse: (reason: string) => never): (Record<string, unknown> & { $: string }) | undefined;
  /**
   * The value for a tagged object this extension owns (fields revived with `revive`, `key` naming
   * the field in errors), else undefined.
   */
  decode(tagged: Record<string, unknown>, revive: (value: unknown, key?: string) => unknown): unknown;
  /** A value starts to be encoded or decoded: what the extension counts per crossing starts over. */
  begin?(): void;
  /**
   * What the extension has counted in the crossing so far, and a way back to it: an export that
   * cannot cross is skipped, and what its encode counted before it failed must not count against
   * the exports after it (the host never sees it).
   */
  mark?(): number[];
  rewind?(mark: number[]): void;
}

/** What `extend` and `limitCopies` change, shared by the parts that read it. */
export interface CodecState {
  /** See `limitCopies`. */
  copyCeiling: number;
  extension: CodecExtension | undefined;
}

/** The codec's parts, each a self-contained factory (see the top of this file). */
const CODEC_PARTS = {
  captureCodecBuiltins,
  createBase64,
  createCodecFailures,
  createEncoder,
  createFastPath,
  createDecoder,
  createContainerWeight,
};

type CodecParts = typeof CODEC_PARTS;

/** What every encoder writes for `undefined` (the input of a run given none). */
export const ENCODED_UNDEFINED = '{"$":"u"}';

/** `trusted` is for the host's own codec only: it enables a JSON.stringify fast path for plain data. */
export function createCodec(trusted = false): Codec {
  return assembleCodec(CODEC_PARTS, trusted);
}

/**
 * The source of an expression that evaluates, in any realm, to `(trusted = false) => Codec`: the
 * same parts the host's `createCodec` assembles, stringified. Run it before any guest code.
 */
export function codecSource(): string {
  const parts = Object.entries(CODEC_PARTS).map(([name, part]) => `${name}: (${part.toString()})`);
  return `((parts, assemble) => (trusted = false) => assemble(parts, trusted))({\n${parts.join(",\n")}\n}, (${assembleCodec.toString()}))`;
}

/** A codec from its parts. SELF-CONTAINED: stringified by `codecSource`. */
function assembleCodec(parts: CodecParts, trusted: boolean): Codec {
  const builtins = parts.captureCodecBuiltins(trusted);
  const { charCodeOf, parse, setPrototypeOf, StringCtor } = builtins;
  // No prototype: its reads and writes stay on it, whatever a guest later puts on Object.prototype.
  const state = setPrototypeOf({ copyCeiling: Number.POSITIVE_INFINITY, extension: undefined }, null) as CodecState;
  const base64 = parts.createBase64(builtins);
  const failures = parts.createCodecFailures(builtins, state);
  const encoder = parts.createEncoder(builtins, base64, failures, state);
  const { encodeWith, nested } = encoder;
  const encodeFast = parts.createFastPath(builtins, encoder, failures, state, trusted);
  const revive = parts.createDecoder(builtins, base64, failures, state);
  const weighText = parts.createContainerWeight(builtins, failures);
  const { forget, threw, refused, overflowed } = failures;

  return {
    encode(value, rootPath = "value", maxChars = Number.POSITIVE_INFINITY, stacks = true, continuing = false) {
      forget();
      const inner = nested();
      // A crossing's counts start over, but not inside an encode: a getter's log would reset them.
      if (!continuing && !inner) state.extension?.begin?.();
      // A part of a crossing that fails (an export, then skipped) leaves the counts as it found them.
      const mark = continuing && !inner ? state.extension?.mark?.() : undefined;
      try {
        return encodeFast(value, rootPath, maxChars) ?? encodeWith(value, rootPath, maxChars, false, stacks);
      } catch (error) {
        if (mark !== undefined) state.extension?.rewind?.(mark);
        throw error;
      }
    },
    encodeFast(value, rootPath = "value", maxChars = Number.POSITIVE_INFINITY) {
      forget();
      return encodeFast(value, rootPath, maxChars);
    },
    threw,
    refused,
    overflowed,
    decode(text, rootPath = "value", allowance = 0) {
      // Before JSON.parse builds what the text holds: on the host's thread, a guest's.
      if (trusted) weighText(text, rootPath, allowance);
      let tree: unknown;
      try {
        tree = parse(text);
      } catch (error) {
        // Not JSON, or (QuickJS, whose parser recurses) nested past what it can parse.
        let reason = "";
        try {
          reason = StringCtor((error as Error).message);
        } catch {}
        // QuickJS's allocator refusing the parse is the memory limit, not unreadable text: it
        // goes on as thrown, and the run fails with ERR_MEMORY_LIMIT (was ERR_USER_CODE).
        if (reason === "out of memory") throw error;
        failures.fail("ERR_NOT_SERIALIZABLE", rootPath, failures.shown(rootPath) + " is not JSON text it can read: " + reason);
      }
      // Text marked plain holds no tags: nothing to revive. (A guest marking its own text so
      // only keeps tags from being revived: its values stay inert data.)
      if (charCodeOf(text, 0) === 32) return tree;
      state.extension?.begin?.();
      return revive(tree, rootPath);
    },
    weigh(text, rootPath = "value", allowance = 0) {
      if (trusted) weighText(text, rootPath, allowance);
    },
    revive(tree, rootPath = "value", continuing = false) {
      if (!continuing) state.extension?.begin?.();
      return revive(tree, rootPath);
    },
    encodeError(error, stacks = true, maxChars = Number.POSITIVE_INFINITY) {
      forget();
      if (!nested()) state.extension?.begin?.();
      return encodeWith(error, "error", maxChars, true, stacks);
    },
    extend(next) {
      state.extension = next;
    },
    limitCopies(chars) {
      state.copyCeiling = chars;
    },
  };
}
