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
  const B64_INDEX = new Uint8Array(128);
  for (let i = 0; i < B64.length; i++) B64_INDEX[charCodeOf(B64, i)] = i;

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

  return { toBase64, fromBase64 };
}

export type Base64 = ReturnType<typeof createBase64>;
