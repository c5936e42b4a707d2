/**
 * Is `text` one JSON value (RFC 8259, as JSON.parse reads it), and of which kind? A single pass
 * over the characters that builds nothing: the executor checks the texts the guest will decode
 * (inputText, argsText, bindings data) without decoding them itself. Decoding them on the
 * service's thread cost as much as the guest's own decode again, uncharged to any run: a 16 MB
 * object of a million keys held the thread 2-4 s per request, the guest then decoding it anyway.
 *
 * Returns "array", "object" or "scalar" for a well-formed text, undefined otherwise, and
 * "excess" as soon as it has met more than `bounds.values` values (containers and leaves) or
 * `bounds.members` object members: a body is weighed so before JSON.parse builds it (a million
 * keys took JSON.parse 2-5 s of the service's thread). Nesting is followed with one small number
 * per open level, bounded by the text's length.
 */
export function scanJson(
  text: string,
  bounds: { values?: number; members?: number } = {},
): "array" | "object" | "scalar" | "excess" | undefined {
  const n = text.length;
  const maxValues = bounds.values ?? Number.POSITIVE_INFINITY;
  const maxMembers = bounds.members ?? Number.POSITIVE_INFINITY;
  let values = 0;
  let members = 0;
  // Open containers, innermost last: true for an object, false for an array.
  const open: boolean[] = [];
  let i = skipSpace(text, 0);
  let kind: "array" | "object" | "scalar" | undefined;
  for (;;) {
    // A value starts at i.
    if (++values > maxValues) return "excess";
    const c = text.charCodeAt(i);
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      kind ??= c === 0x7b ? "object" : "array";
      i = skipSpace(text, i + 1);
      // An empty container is a whole value; otherwise its first member's value starts next.
      if (text.charCodeAt(i) === (c === 0x7b ? 0x7d : 0x5d)) i++;
      else {
        open.push(c === 0x7b);
        if (c === 0x7b) {
          if (++members > maxMembers) return "excess";
          i = key(text, i);
          if (i < 0) return undefined;
        }
        continue;
      }
    } else {
      kind ??= "scalar";
      i = scalar(text, i, c);
      if (i < 0) return undefined;
    }
    // After a value: a comma and the next one, or the close of its container.
    for (;;) {
      i = skipSpace(text, i);
      if (open.length === 0) return i === n ? kind : undefined;
      const inObject = open[open.length - 1];
      const d = text.charCodeAt(i);
      if (d === 0x2c /* , */) {
        i = skipSpace(text, i + 1);
        if (inObject) {
          if (++members > maxMembers) return "excess";
          i = key(text, i);
          if (i < 0) return undefined;
        }
        break;
      }
      if (d !== (inObject ? 0x7d : 0x5d)) return undefined;
      open.pop();
      i++;
    }
  }
}

function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

/** A member's `"name" :` from i, returning where its value starts; -1 when malformed. */
function key(text: string, i: number): number {
  if (text.charCodeAt(i) !== 0x22) return -1;
  i = string(text, i + 1);
  if (i < 0) return -1;
  i = skipSpace(text, i);
  if (text.charCodeAt(i) !== 0x3a /* : */) return -1;
  return skipSpace(text, i + 1);
}

/** A string, number or literal starting at i (whose first character is c): where it ends, or -1. */
function scalar(text: string, i: number, c: number): number {
  if (c === 0x22) return string(text, i + 1);
  if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) return number(text, i);
  for (const word of LITERALS) if (text.startsWith(word, i)) return i + word.length;
  return -1;
}

const LITERALS = ["true", "false", "null"];

/** The rest of a string whose opening quote is before i: the index after its closing quote, or -1. */
function string(text: string, i: number): number {
  const n = text.length;
  while (i < n) {
    // Runs of plain characters at the regex engine's speed (base64 data is one long run).
    PLAIN.lastIndex = i;
    PLAIN.test(text);
    i = PLAIN.lastIndex;
    const c = text.charCodeAt(i++);
    if (c === 0x22) return i;
    if (c < 0x20) return -1;
    if (c === 0x5c /* \ */) {
      const e = text.charCodeAt(i++);
      if (e === 0x75 /* u */) {
        for (let k = 0; k < 4; k++, i++) if (!isHex(text.charCodeAt(i))) return -1;
      } else if (!ESCAPES.includes(e)) return -1;
    }
  }
  return -1;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: JSON strings may not hold U+0000-U+001F raw; the class stops at them.
const PLAIN = /[^"\\\u0000-\u001f]*/y;

// " \ / b f n r t
const ESCAPES = [0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74];

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` from i: where it ends, or -1. */
function number(text: string, i: number): number {
  if (text.charCodeAt(i) === 0x2d) i++;
  if (text.charCodeAt(i) === 0x30) i++;
  else if (isDigit(text.charCodeAt(i))) i = digits(text, i);
  else return -1;
  if (text.charCodeAt(i) === 0x2e /* . */) {
    if (!isDigit(text.charCodeAt(i + 1))) return -1;
    i = digits(text, i + 1);
  }
  const e = text.charCodeAt(i);
  if (e === 0x65 || e === 0x45) {
    i++;
    const sign = text.charCodeAt(i);
    if (sign === 0x2b || sign === 0x2d) i++;
    if (!isDigit(text.charCodeAt(i))) return -1;
    i = digits(text, i);
  }
  return i;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function digits(text: string, i: number): number {
  while (isDigit(text.charCodeAt(i))) i++;
  return i;
}
