/**
 * What the nesting scan (nesting.ts) reads text with: which words are keywords that change how
 * esbuild nests its output, what a character is, and how to step over what is not code (strings,
 * template text, comments, regular expressions). Each skip reports unterminated text (a syntax
 * error), so the scan can drop a reading of the text that reached one.
 */

/** What a word is to the scan (bits). */
export const EXPRESSION = 1; // a `/` after it may start a regular expression (`return /x/`) or divide (`a.return / 2`)
export const BODY = 2; // esbuild indents its brace-less body (it braces nested `if`s)
export const DO = 4;
export const CASE = 8;
export const WHILE = 16;
const KEYWORDS: [string, number][] = [
  ["return", EXPRESSION],
  ["typeof", EXPRESSION],
  ["instanceof", EXPRESSION],
  ["in", EXPRESSION],
  ["of", EXPRESSION],
  ["new", EXPRESSION],
  ["delete", EXPRESSION],
  ["void", EXPRESSION],
  ["throw", EXPRESSION],
  ["case", EXPRESSION | CASE],
  ["default", CASE],
  ["do", EXPRESSION | DO],
  ["else", EXPRESSION | BODY],
  ["yield", EXPRESSION],
  ["await", EXPRESSION],
  ["extends", EXPRESSION],
  ["if", BODY],
  ["for", BODY],
  ["while", BODY | WHILE],
  ["with", BODY],
];
/** The keywords by first letter: words are matched in place, never sliced (most words are not keywords). */
const KEYWORDS_BY_LETTER: [string, number][][] = Array.from({ length: 26 }, (_, k) =>
  KEYWORDS.filter(([word]) => word.charCodeAt(0) === 0x61 + k),
);

export function keywordAt(code: string, from: number, length: number): number {
  for (const [word, kind] of KEYWORDS_BY_LETTER[code.charCodeAt(from) - 0x61]) {
    if (word.length === length && code.startsWith(word, from)) return kind;
  }
  return 0;
}

export function isWordStart(c: number): boolean {
  return (
    (c >= 0x61 && c <= 0x7a) ||
    (c >= 0x41 && c <= 0x5a) ||
    (c >= 0x30 && c <= 0x39) ||
    c === 0x5f ||
    c === 0x24 ||
    c === 0x5c ||
    (c >= 0x80 && !isSpace(c))
  );
}

/** Non-ASCII white space and line terminators (not part of a word). */
export function isSpace(c: number): boolean {
  return (
    c === 0xa0 ||
    c === 0xfeff ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  );
}

export function isLineTerminator(c: number): boolean {
  return c === 0x0a || c === 0x0d || c === 0x2028 || c === 0x2029;
}

/** Where a `//` comment's line ends (esbuild's line terminators: \n, \r, U+2028, U+2029). */
export function lineEnd(code: string, i: number): number {
  while (i < code.length && !isLineTerminator(code.charCodeAt(i))) i++;
  return i;
}

/*
 * The skips below answer where their token ends, or, when it is unterminated (a syntax error),
 * `~stop`: a negative number that still says how far they read (`~result`), so the scan counts
 * that work too. A failed read it did not count let hostile text fork a reading at every `/` and
 * have each fork read to its line's end uncounted: quadratic, 44 s for 512 KB on the host's thread.
 */

/** Past a quoted string starting at `i` (after its quote); `~stop` when it is unterminated. */
export function skipString(code: string, i: number, quote: number): number {
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (c === 0x5c) {
      // An escaped CRLF is one line continuation.
      i += code.charCodeAt(i + 1) === 0x0d && code.charCodeAt(i + 2) === 0x0a ? 3 : 2;
    } else if (c === quote) return i + 1;
    else if (c === 0x0a || c === 0x0d) return ~i;
    else i++;
  }
  return ~Math.min(i, code.length);
}

/** Past a regular expression's body and closing `/` from `i`; `~stop` when unterminated on its line. */
export function skipRegex(code: string, i: number): number {
  let inClass = false;
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (isLineTerminator(c)) return ~i;
    if (c === 0x5c) {
      if (i + 1 >= code.length || isLineTerminator(code.charCodeAt(i + 1))) return ~i;
      i += 2;
      continue;
    }
    if (c === 0x5b) inClass = true;
    else if (c === 0x5d) inClass = false;
    else if (c === 0x2f && !inClass) return i + 1;
    i++;
  }
  return ~i;
}

/** Past template text starting at `i`: to its closing backtick, or just into a `${`; past the end when unterminated. */
export function skipTemplate(code: string, i: number): { end: number; substitution: boolean } {
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (c === 0x5c) i += 2;
    else if (c === 0x60) return { end: i + 1, substitution: false };
    else if (c === 0x24 && code.charCodeAt(i + 1) === 0x7b) return { end: i + 2, substitution: true };
    else i++;
  }
  return { end: code.length + 1, substitution: false };
}
