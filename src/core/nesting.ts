/**
 * How deeply guest text nests brackets, counted cheaply before esbuild sees it. esbuild indents
 * its output two spaces a level, so output grows with the square of the depth: 40 KB of nested
 * blocks came back as more than 536 M characters, and esbuild's client threw where nothing could
 * catch it (the host process exited); 100,000 nested arrows overflowed esbuild's own stack. No
 * real module nests a thousand levels.
 *
 * Strings, template text and comments are skipped; a regular expression literal is read as code,
 * which can only miscount its few brackets.
 */
export const MAX_NESTING = 1000;

/** True when `code` nests `(`, `[`, `{` or `${` deeper than `limit`. */
export function nestsDeeperThan(code: string, limit = MAX_NESTING): boolean {
  let depth = 0;
  // The depth of each open template substitution: its `}` returns to template text.
  const substitutions: number[] = [];
  let i = 0;
  const n = code.length;
  // After template text: a `${` opens a level.
  const template = (from: number): boolean => {
    const t = skipTemplate(code, from);
    i = t.end;
    if (!t.substitution) return false;
    substitutions.push(++depth);
    return depth > limit;
  };
  while (i < n) {
    const c = code.charCodeAt(i);
    if (c === 0x28 || c === 0x5b || c === 0x7b) {
      // ( [ {
      if (++depth > limit) return true;
      i++;
    } else if (c === 0x7d && substitutions.length > 0 && substitutions[substitutions.length - 1] === depth) {
      // The `}` of a `${`: back into template text.
      substitutions.pop();
      depth--;
      if (template(i + 1)) return true;
    } else if (c === 0x29 || c === 0x5d || c === 0x7d) {
      // ) ] }
      if (depth > 0) depth--;
      i++;
    } else if (c === 0x22 || c === 0x27) {
      i = skipString(code, i + 1, c);
    } else if (c === 0x60) {
      if (template(i + 1)) return true;
    } else if (c === 0x2f && code.charCodeAt(i + 1) === 0x2f) {
      const end = code.indexOf("\n", i + 2);
      i = end < 0 ? n : end + 1;
    } else if (c === 0x2f && code.charCodeAt(i + 1) === 0x2a) {
      const end = code.indexOf("*/", i + 2);
      i = end < 0 ? n : end + 2;
    } else {
      i++;
    }
  }
  return false;
}

/** Past a quoted string starting at `i` (after its quote); escapes skip a character. */
function skipString(code: string, i: number, quote: number): number {
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (c === 0x5c) i += 2;
    else if (c === quote || c === 0x0a) return i + 1;
    else i++;
  }
  return i;
}

/** Past template text starting at `i`: to its closing backtick, or just into a `${`. */
function skipTemplate(code: string, i: number): { end: number; substitution: boolean } {
  while (i < code.length) {
    const c = code.charCodeAt(i);
    if (c === 0x5c) i += 2;
    else if (c === 0x60) return { end: i + 1, substitution: false };
    else if (c === 0x24 && code.charCodeAt(i + 1) === 0x7b) return { end: i + 2, substitution: true };
    else i++;
  }
  return { end: i, substitution: false };
}
