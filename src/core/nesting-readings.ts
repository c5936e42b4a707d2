/**
 * A reading of the text: where the nesting scan (nesting.ts) is and what it has counted. Where a
 * `/` could be a division or a regular expression, the scan follows both readings; readings that
 * meet at the same place in the same state are merged, keeping the larger counts, so the scan
 * never counts less than either would.
 */

/** What a `/` at this point is: a regular expression, a division, or either (follow both). */
export const REGEX = 0;
export const DIVISION = 1;
export const EITHER = 2;

/** One reading of the text, at `pos`, in code (never inside a string, template text or comment). */
export interface Reading {
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

/** May two readings at the same place go on as one? */
export function mergeable(a: Reading, b: Reading): boolean {
  if (a.subs.length !== b.subs.length) return false;
  if (a.subs.length === 0) return true;
  // Inside a template substitution the depth decides where it ends: only equal states merge.
  if (a.depth !== b.depth) return false;
  for (let k = 0; k < a.subs.length; k++) if (a.subs[k] !== b.subs[k]) return false;
  return true;
}

/** `into` becomes a reading that counts at least as much as either, from here on. */
export function merge(into: Reading, from: Reading): void {
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
