/**
 * How deeply guest text nests, and how large esbuild's output of it could be, read cheaply before
 * esbuild sees it. esbuild indents its output two spaces a level, so output grows with the square
 * of the depth: 40 KB of nested blocks came back as more than 536 M characters, and esbuild's
 * client threw where nothing could catch it (the host process exited); 100,000 nested arrows
 * overflowed esbuild's own stack. Brackets are not the only nesting: esbuild braces and indents
 * nested brace-less `if`s (10 KB of `if(a)` came back as 8 M characters), `do` bodies and `case`s.
 *
 * The scan must never count less than esbuild will parse, whatever the text. Strings, template
 * text, comments and regular expressions are skipped, and a `/` is the one place where a lexer
 * cannot tell which without parsing (`a / b / c` or `if (a) /re/`): reading a regular expression
 * as a division lets its `"` open a "string" that hides the rest of the line (or its backtick,
 * the rest of the file), and the other way round hides what the division's operands hold. So where
 * the previous token does not decide it, both readings are followed, each as its own scan; a
 * reading that reaches a syntax error (an unterminated string or regular expression) is dropped,
 * and scans that meet at the same place in the same state are merged, keeping the larger counts.
 * Text that keeps too many readings alive is refused: over-counting odd code is allowed,
 * under-counting never.
 */
export const MAX_NESTING = 1000;

/**
 * The largest output (in characters) the estimate may reach. esbuild's client fails past 2^29-24
 * characters in one string; real modules stay far below (the estimate for 16 MiB of minified
 * code, the largest module a run takes, is about 150 M).
 */
export const MAX_OUTPUT_ESTIMATE = 256 * 1024 * 1024;

/** Readings of the text followed at once before it is refused as too ambiguous to scan. */
const MAX_READINGS = 32;

/** Why text is refused: nested too deeply, compiles to too much output, or cannot be read cheaply. */
export type NestingVerdict = { kind: "deep" } | { kind: "large"; estimate: number } | { kind: "ambiguous" } | undefined;

/** What a `/` at this point is: a regular expression, a division, or either (follow both). */
const REGEX = 0;
const DIVISION = 1;
const EITHER = 2;

/** What a word is to the scan (bits). */
const EXPRESSION = 1; // a `/` after it may start a regular expression (`return /x/`) or divide (`a.return / 2`)
const BODY = 2; // esbuild indents its brace-less body (it braces nested `if`s)
const DO = 4;
const CASE = 8;
const WHILE = 16;
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

function keywordAt(code: string, from: number, length: number): number {
  for (const [word, kind] of KEYWORDS_BY_LETTER[code.charCodeAt(from) - 0x61]) {
    if (word.length === length && code.startsWith(word, from)) return kind;
  }
  return 0;
}

/** One reading of the text, at `pos`, in code (never inside a string, template text or comment). */
interface Reading {
  pos: number;
  depth: number;
  /** The depth of each open template substitution: its `}` returns to template text. */
  subs: number[];
  slash: number;
  /**
   * Per depth d, at 3d..3d+2: brace-less bodies open there (reset by `;`), `do`s awaiting their
   * `while`, and 1 for a switch body (its `case`s are indented once more).
   */
  levels: number[];
  /** The sum of `levels`: indentation esbuild adds without a bracket. */
  extra: number;
  /** Estimated output characters for line starts so far (their indentation). */
  lines: number;
}

/** True when `code` nests deeper than `limit` (kept for callers that only ask about depth). */
export function nestsDeeperThan(code: string, limit = MAX_NESTING): boolean {
  return scanNesting(code, limit)?.kind === "deep";
}

/**
 * Scan `code`: undefined when esbuild may see it; otherwise why not. `maxOutput` bounds the output
 * estimate: two characters a code unit of text (esbuild spaces operators), six a non-ASCII one
 * (printed as `\uXXXX`), plus each possible line start (`{`, `}`, `;`, `,`, a newline, a statement
 * keyword) indented two spaces a level.
 */
export function scanNesting(code: string, limit = MAX_NESTING, maxOutput = MAX_OUTPUT_ESTIMATE): NestingVerdict {
  const n = code.length;
  let text = 2 * n;
  for (let i = 0; i < n; i++) if (code.charCodeAt(i) > 0x7f) text += 5;
  if (text > maxOutput) return { kind: "large", estimate: text };
  const lineBudget = maxOutput - text;
  // Work beyond a few passes over the text means readings that never die out: refused.
  let work = 0;
  const workBudget = 8 * n + 1_000_000;
  let start = 0;
  // A hashbang line is a comment.
  if (code.startsWith("#!")) start = lineEnd(code, 2);
  const readings: Reading[] = [{ pos: start, depth: 0, subs: [], slash: REGEX, levels: [0, 0, 0], extra: 0, lines: 0 }];
  let verdict: NestingVerdict;

  /**
   * Advance `r` up to `until` (where the next reading is), or until it forks or ends. Returns
   * false when the reading is over (end of text or a syntax error); `verdict` set means refuse.
   * The reading's counts live in locals meanwhile (this loop is most of the scan's time).
   */
  const advance = (r: Reading, until: number): boolean => {
    const count = readings.length;
    let { pos, depth, slash, extra, lines, levels } = r;
    const subs = r.subs;
    let steps = 0;
    let alive = true;
    // Line starts cost their indentation (two spaces a level) and a newline. Inlined below, as are
    // opening and closing a level: closures over these locals made the scan four times slower.
    loop: do {
      if (pos >= n) {
        alive = false;
        break;
      }
      const c = code.charCodeAt(pos);
      steps++;
      switch (c) {
        case 0x28: // (
        case 0x5b: // [
          depth++;
          levels[3 * depth] = 0;
          levels[3 * depth + 1] = 0;
          levels[3 * depth + 2] = 0;
          if (depth + extra > limit) {
            verdict = { kind: "deep" };
            break loop;
          }
          pos++;
          slash = REGEX;
          break;
        case 0x7b: // {
          depth++;
          levels[3 * depth] = 0;
          levels[3 * depth + 1] = 0;
          levels[3 * depth + 2] = 0;
          if (depth + extra > limit) {
            verdict = { kind: "deep" };
            break loop;
          }
          lines += 2 * (depth + extra) + 1;
          if (lines > lineBudget) {
            verdict = { kind: "large", estimate: text + lines };
            break loop;
          }
          pos++;
          slash = REGEX;
          break;
        case 0x29: // )
        case 0x5d: // ]
          // After `)` a `/` may be either (`if (a) /x/`, `(a) / 2`).
          if (depth > 0) {
            extra -= levels[3 * depth] + levels[3 * depth + 1] + levels[3 * depth + 2];
            levels.length = 3 * depth;
            depth--;
          }
          pos++;
          slash = c === 0x5d ? DIVISION : EITHER;
          break;
        case 0x7d: {
          // }
          if (subs.length > 0 && subs[subs.length - 1] === depth) {
            // The `}` of a `${`: back into template text.
            subs.pop();
            if (depth > 0) {
              extra -= levels[3 * depth] + levels[3 * depth + 1] + levels[3 * depth + 2];
              levels.length = 3 * depth;
              depth--;
            }
            {
              const t = skipTemplate(code, pos + 1);
              steps += t.end - pos;
              pos = t.end;
              if (t.end > n) {
                alive = false;
                break loop;
              }
              if (t.substitution) {
                depth++;
                levels[3 * depth] = 0;
                levels[3 * depth + 1] = 0;
                levels[3 * depth + 2] = 0;
                if (depth + extra > limit) {
                  verdict = { kind: "deep" };
                  break loop;
                }
                subs.push(depth);
                slash = REGEX;
              } else {
                slash = DIVISION;
              }
            }
            break;
          }
          if (depth > 0) {
            extra -= levels[3 * depth] + levels[3 * depth + 1] + levels[3 * depth + 2];
            levels.length = 3 * depth;
            depth--;
          }
          // A braced body ends the statements that held it.
          const at = 3 * depth;
          extra -= levels[at];
          levels[at] = 0;
          lines += 2 * (depth + extra) + 1;
          if (lines > lineBudget) {
            verdict = { kind: "large", estimate: text + lines };
            break loop;
          }
          pos++;
          slash = EITHER;
          break;
        }
        case 0x22: // "
        case 0x27: {
          // '
          const end = skipString(code, pos + 1, c);
          if (end < 0) {
            alive = false;
            break loop;
          }
          steps += end - pos;
          pos = end;
          slash = DIVISION;
          break;
        }
        case 0x60: // `
          {
            const t = skipTemplate(code, pos + 1);
            steps += t.end - pos;
            pos = t.end;
            if (t.end > n) {
              alive = false;
              break loop;
            }
            if (t.substitution) {
              depth++;
              levels[3 * depth] = 0;
              levels[3 * depth + 1] = 0;
              levels[3 * depth + 2] = 0;
              if (depth + extra > limit) {
                verdict = { kind: "deep" };
                break loop;
              }
              subs.push(depth);
              slash = REGEX;
            } else {
              slash = DIVISION;
            }
          }
          break;
        case 0x2f: {
          // /
          const next = code.charCodeAt(pos + 1);
          if (next === 0x2f) {
            const end = lineEnd(code, pos + 2);
            steps += end - pos;
            pos = end;
          } else if (next === 0x2a) {
            const end = code.indexOf("*/", pos + 2);
            if (end < 0) {
              alive = false;
              break loop;
            }
            steps += end - pos;
            pos = end + 2;
          } else {
            if (slash === EITHER) {
              // Both readings: this one as a division, a copy as a regular expression (unless that
              // is unterminated on its line, a syntax error: most divisions end there).
              const end = skipRegex(code, pos + 1);
              if (end >= 0) {
                steps += end - pos;
                readings.push({ pos: end, depth, subs: subs.slice(), slash: DIVISION, levels: levels.slice(), extra, lines });
              }
              slash = DIVISION;
            }
            if (slash === DIVISION) {
              pos++;
              slash = REGEX;
            } else {
              const end = skipRegex(code, pos + 1);
              if (end < 0) {
                alive = false;
                break loop;
              }
              steps += end - pos;
              pos = end;
              slash = DIVISION;
            }
          }
          break;
        }
        case 0x3b: {
          // ; ends the brace-less bodies open at this depth.
          const at = 3 * depth;
          extra -= levels[at];
          levels[at] = 0;
          lines += 2 * (depth + extra) + 1;
          if (lines > lineBudget) {
            verdict = { kind: "large", estimate: text + lines };
            break loop;
          }
          pos++;
          slash = REGEX;
          break;
        }
        case 0x0a: // newline
          lines += 2 * (depth + extra) + 1;
          if (lines > lineBudget) {
            verdict = { kind: "large", estimate: text + lines };
            break loop;
          }
          pos++;
          break;
        case 0x2c: // ,
          lines += 2 * (depth + extra) + 1;
          if (lines > lineBudget) {
            verdict = { kind: "large", estimate: text + lines };
            break loop;
          }
          pos++;
          slash = REGEX;
          break;
        case 0x20:
        case 0x09:
        case 0x0d:
        case 0x0b:
        case 0x0c:
          pos++;
          break;
        case 0x2b: // +
        case 0x2d: // -
          // ++ --: `a++ / 2` or `++/x/.lastIndex`.
          if (code.charCodeAt(pos + 1) === c) {
            pos += 2;
            slash = EITHER;
          } else {
            pos++;
            slash = REGEX;
          }
          break;
        case 0x21: // ! (TypeScript's non-null `x! / 2`)
        case 0x3e: // > (`f<T> / 2`)
        case 0x2e: // .
        case 0x23: // #
        case 0x40: // @
          pos++;
          slash = EITHER;
          break;
        default: {
          if (c >= 0x80 && isSpace(c)) {
            pos++;
            break;
          }
          if (!isWordStart(c)) {
            // Any other punctuator: an expression follows.
            pos++;
            slash = REGEX;
            break;
          }
          const from = pos;
          let plain = c < 0x80 && c !== 0x5c;
          pos++;
          while (pos < n) {
            const d = code.charCodeAt(pos);
            if (!isWordStart(d)) break;
            if (d >= 0x80 || d === 0x5c) plain = false;
            pos++;
          }
          steps += pos - from;
          slash = DIVISION;
          if (!plain) {
            // Non-ASCII or escaped: perhaps not an identifier at all.
            slash = EITHER;
            break;
          }
          // Only words that may be keywords are looked at (two to ten lowercase letters).
          const length = pos - from;
          if (length < 2 || length > 10 || c < 0x61 || c > 0x7a) break;
          const kind = keywordAt(code, from, length);
          if (kind === 0) break;
          if (kind & EXPRESSION) slash = EITHER;
          const at = 3 * depth;
          if (kind & BODY) {
            levels[at]++;
            extra++;
            if (kind & WHILE && levels[at + 1] > 0) {
              // The `while` of a `do`: its body is over.
              levels[at + 1]--;
              extra--;
            }
          } else if (kind & DO) {
            levels[at + 1]++;
            extra++;
          } else if (kind & CASE) {
            if (levels[at + 2] === 0) {
              levels[at + 2] = 1;
              extra++;
            }
          } else {
            break;
          }
          if (depth + extra > limit) {
            verdict = { kind: "deep" };
            break loop;
          }
          lines += 2 * (depth + extra) + 1;
          if (lines > lineBudget) {
            verdict = { kind: "large", estimate: text + lines };
            break loop;
          }
        }
      }
    } while (pos < until && readings.length === count);
    r.pos = pos;
    r.depth = depth;
    r.slash = slash;
    r.extra = extra;
    r.lines = lines;
    r.levels = levels;
    work += steps;
    return alive && !verdict;
  };

  while (readings.length > 0) {
    // The reading furthest behind goes first, up to the next one: readings meet where they can merge.
    let index = 0;
    let until = Number.POSITIVE_INFINITY;
    for (let k = 1; k < readings.length; k++) {
      if (readings[k].pos < readings[index].pos) {
        until = readings[index].pos;
        index = k;
      } else {
        until = Math.min(until, readings[k].pos);
      }
    }
    const r = readings[index];
    const alive = advance(r, until);
    if (verdict) return verdict;
    if (work > workBudget) return { kind: "ambiguous" };
    if (!alive) {
      readings.splice(readings.indexOf(r), 1);
      continue;
    }
    if (readings.length > 1) {
      // Readings that meet in the same state go on as one, with the larger counts.
      for (let k = 0; k < readings.length; k++) {
        const other = readings[k];
        if (other === r || other.pos !== r.pos || !mergeable(other, r)) continue;
        merge(other, r);
        readings.splice(readings.indexOf(r), 1);
        break;
      }
      if (readings.length > MAX_READINGS) return { kind: "ambiguous" };
    }
  }
  return undefined;
}

function mergeable(a: Reading, b: Reading): boolean {
  if (a.subs.length !== b.subs.length) return false;
  if (a.subs.length === 0) return true;
  // Inside a template substitution the depth decides where it ends: only equal states merge.
  if (a.depth !== b.depth) return false;
  for (let k = 0; k < a.subs.length; k++) if (a.subs[k] !== b.subs[k]) return false;
  return true;
}

/** `into` becomes a reading that counts at least as much as either, from here on. */
function merge(into: Reading, from: Reading): void {
  if (from.depth > into.depth) {
    const levels = from.levels.slice();
    for (let k = 0; k < into.levels.length; k++) levels[k] = Math.max(levels[k], into.levels[k]);
    into.levels = levels;
    into.depth = from.depth;
  } else {
    for (let k = 0; k < from.levels.length; k++) into.levels[k] = Math.max(into.levels[k], from.levels[k]);
  }
  into.extra = 0;
  for (const level of into.levels) into.extra += level;
  into.lines = Math.max(into.lines, from.lines);
  if (into.slash !== from.slash) into.slash = EITHER;
}

function isWordStart(c: number): boolean {
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
function isSpace(c: number): boolean {
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

function isLineTerminator(c: number): boolean {
  return c === 0x0a || c === 0x0d || c === 0x2028 || c === 0x2029;
}

/** Where a `//` comment's line ends (esbuild's line terminators: \n, \r, U+2028, U+2029). */
function lineEnd(code: string, i: number): number {
  while (i < code.length && !isLineTerminator(code.charCodeAt(i))) i++;
  return i;
}

/** Past a quoted string starting at `i` (after its quote); -1 when it is unterminated (a syntax error). */
function skipString(code: string, i: number, quote: number): number {
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (c === 0x5c) {
      // An escaped CRLF is one line continuation.
      i += code.charCodeAt(i + 1) === 0x0d && code.charCodeAt(i + 2) === 0x0a ? 3 : 2;
    } else if (c === quote) return i + 1;
    else if (c === 0x0a || c === 0x0d) return -1;
    else i++;
  }
  return -1;
}

/** Past a regular expression's body and closing `/` from `i`; -1 when unterminated on its line. */
function skipRegex(code: string, i: number): number {
  let inClass = false;
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (isLineTerminator(c)) return -1;
    if (c === 0x5c) {
      if (i + 1 >= code.length || isLineTerminator(code.charCodeAt(i + 1))) return -1;
      i += 2;
      continue;
    }
    if (c === 0x5b) inClass = true;
    else if (c === 0x5d) inClass = false;
    else if (c === 0x2f && !inClass) return i + 1;
    i++;
  }
  return -1;
}

/** Past template text starting at `i`: to its closing backtick, or just into a `${`; past the end when unterminated. */
function skipTemplate(code: string, i: number): { end: number; substitution: boolean } {
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (c === 0x5c) i += 2;
    else if (c === 0x60) return { end: i + 1, substitution: false };
    else if (c === 0x24 && code.charCodeAt(i + 1) === 0x7b) return { end: i + 2, substitution: true };
    else i++;
  }
  return { end: code.length + 1, substitution: false };
}
