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
 *
 * This file is the scan; what it reads text with is nesting-lexer.ts, and a reading of the text
 * (and how two are merged) is nesting-readings.ts.
 */
import {
  BODY,
  CASE,
  DO,
  EXPRESSION,
  WHILE,
  isWordStart,
  isSpace,
  keywordAt,
  lineEnd,
  skipRegex,
  skipString,
  skipTemplate,
} from "./nesting-lexer.js";
import { DIVISION, EITHER, REGEX, type Reading, merge, mergeable } from "./nesting-readings.js";

/** The deepest nesting, brackets and esbuild's own indentation levels together, that esbuild may see. */
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
            steps += ~end - pos;
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
              steps += n - pos;
              alive = false;
              break loop;
            }
            steps += end - pos;
            pos = end + 2;
          } else {
            if (slash === EITHER) {
              // Both readings: this one as a division, a copy as a regular expression (unless that
              // is unterminated on its line, a syntax error: most divisions end there).
              // Each fork counts what it read and what it copied: a reading 1,000 levels deep forked
              // at every `a++/1/` copied 3,000 counts each time, uncounted (26 s for 16 MiB).
              // Checked here, not only between advances: a fork that dies at once leaves this
              // reading going on, alone, to the end of the text.
              const end = skipRegex(code, pos + 1);
              if (end >= 0) {
                steps += end - pos + levels.length + subs.length;
                readings.push({ pos: end, depth, subs: subs.slice(), slash: DIVISION, levels: levels.slice(), extra, lines });
              } else {
                steps += ~end - pos;
              }
              if (work + steps > workBudget) {
                verdict = { kind: "ambiguous" };
                break loop;
              }
              slash = DIVISION;
            }
            if (slash === DIVISION) {
              pos++;
              slash = REGEX;
            } else {
              const end = skipRegex(code, pos + 1);
              if (end < 0) {
                steps += ~end - pos;
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
    // Choosing it, and looking for one to merge with, count too: two readings at one place that
    // cannot merge go on a step each in turn, and their comparisons (of open template
    // substitutions, ~1,000 deep) held the host's thread 24 s for 2 MiB, uncounted.
    work += readings.length;
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
        if (other === r || other.pos !== r.pos) continue;
        work += r.subs.length;
        if (!mergeable(other, r)) continue;
        work += other.levels.length + r.levels.length;
        merge(other, r);
        readings.splice(readings.indexOf(r), 1);
        break;
      }
      if (readings.length > MAX_READINGS) return { kind: "ambiguous" };
    }
  }
  return undefined;
}
