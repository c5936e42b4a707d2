import type { CodecBuiltins } from "./codec-builtins.js";

/**
 * Bytes as base64 text and back: how ArrayBuffers and typed arrays cross (tags "a" and "t").
 * Written out rather than taken from the realm: a bare V8 isolate has no btoa or Buffer, and a
 * guest could replace either where one exists.
 *
 * SELF-CONTAINED, like every part of the codec: it is stringified into guest realms (codec.ts).
 */
export function createBase64(builtins: CodecBuiltins) {
  const { applyFn, bareArray, charCodeOf, fromCharCode, typedLength, Uint8 } = builtins;
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  // Each ASCII character's digit; -2**24 when it is not one, which makes its group's value (under
  // 2**24 from the other three) negative; no entry past ASCII. Prototype-less: a missing index
  // must read as undefined, whatever a guest puts on Array.prototype. Small integers, not a typed
  // array or a mark to OR together: what both V8 and QuickJS add fastest (a bit OR'd from each
  // group cost QuickJS ~15% on bytes, -Infinity cost V8 ~12%).
  const B64_VALUE = bareArray<number>();
  for (let i = 0; i < 128; i++) B64_VALUE[i] = -16777216;
  for (let i = 0; i < B64.length; i++) B64_VALUE[charCodeOf(B64, i)] = i;

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

  /**
   * The bytes `text` holds, or undefined when it is not base64: a character outside the alphabet,
   * a length no bytes encode to, or padding that does not complete the last group. (Read
   * leniently, a damaged payload came back as zeros or an empty array, and nothing said so.)
   * Padding may be left out, as some encoders do.
   */
  function fromBase64(text: string): Uint8Array | undefined {
    const total = text.length;
    let len = total;
    while (len > 0 && len > total - 2 && charCodeOf(text, len - 1) === 61) len--;
    if (len % 4 === 1 || (len !== total && total % 4 !== 0)) return undefined;
    const size = (len * 3) >> 2;
    const out = new Uint8(size);
    let o = 0;
    let i = 0;
    // Whole groups of four without a bound check each; the short last group after.
    for (const whole = len - (len & 3); i < whole; i += 4) {
      const n =
        B64_VALUE[charCodeOf(text, i)] * 262144 +
        B64_VALUE[charCodeOf(text, i + 1)] * 4096 +
        B64_VALUE[charCodeOf(text, i + 2)] * 64 +
        B64_VALUE[charCodeOf(text, i + 3)];
      // A character outside the alphabet makes a group negative, one past ASCII (no entry) NaN.
      if (!(n >= 0)) return undefined;
      out[o++] = n >> 16;
      out[o++] = (n >> 8) & 255;
      out[o++] = n & 255;
    }
    if (i < len) {
      // Two or three characters: one or two bytes.
      const n =
        B64_VALUE[charCodeOf(text, i)] * 262144 +
        B64_VALUE[charCodeOf(text, i + 1)] * 4096 +
        (i + 2 < len ? B64_VALUE[charCodeOf(text, i + 2)] * 64 : 0);
      if (!(n >= 0)) return undefined;
      out[o++] = n >> 16;
      if (o < size) out[o++] = (n >> 8) & 255;
    }
    return out;
  }

  return { toBase64, fromBase64 };
}

export type Base64 = ReturnType<typeof createBase64>;
