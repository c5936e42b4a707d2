/**
 * Map positions in esbuild's output back to the guest's own text, so stack traces point at the
 * lines the caller wrote. Decodes the "mappings" field of a version 3 source map (Base64 VLQ).
 */
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const DIGIT = new Map([...B64].map((c, i) => [c, i]));
const DIGIT_CODE = new Int8Array(128).fill(-1);
for (let i = 0; i < B64.length; i++) DIGIT_CODE[B64.charCodeAt(i)] = i;

/**
 * Where generated positions came from. Either decoded rows (segments[generatedLine] =
 * [generatedColumn, originalLine, originalColumn] triples, sorted by column), or, as normalized
 * modules keep it, esbuild's "mappings" text as it came: decoding a large module's map up front took
 * 1–1.6 s of the host's event loop per module and held hundreds of MB as arrays of arrays, for
 * stacks most runs never remap. `firstLineShift` is taken off columns on the original's first line
 * (a wrapped function body's).
 */
export type LineMap = number[][] | EncodedLineMap;
export interface EncodedLineMap {
  mappings: string;
  firstLineShift?: number;
}

export function decodeMappings(mappings: string): number[][] {
  const lines: number[][] = [];
  let originalLine = 0;
  let originalColumn = 0;
  let sourceIndex = 0;
  for (const lineText of mappings.split(";")) {
    const segments: number[] = [];
    let generatedColumn = 0;
    for (const segment of lineText.split(",")) {
      if (!segment) continue;
      const fields = decodeVlq(segment);
      generatedColumn += fields[0];
      if (fields.length >= 4) {
        sourceIndex += fields[1];
        originalLine += fields[2];
        originalColumn += fields[3];
        segments.push(generatedColumn, originalLine, originalColumn);
      }
    }
    lines.push(segments);
  }
  void sourceIndex;
  return lines;
}

function decodeVlq(segment: string): number[] {
  const out: number[] = [];
  let value = 0;
  let shift = 0;
  for (const char of segment) {
    const digit = DIGIT.get(char) ?? 0;
    value += (digit & 31) << shift;
    if (digit & 32) {
      shift += 5;
    } else {
      out.push(value & 1 ? -(value >>> 1) : value >>> 1);
      value = 0;
      shift = 0;
    }
  }
  return out;
}

/**
 * For an encoded map: where each generated line's text starts in `mappings`, and the original
 * line and column the deltas continue from there (3 numbers a line). Made once, on the first
 * lookup, in one pass without allocating per segment.
 */
const lineIndexes = new WeakMap<EncodedLineMap, Int32Array>();

function lineIndex(map: EncodedLineMap): Int32Array {
  let index = lineIndexes.get(map);
  if (index) return index;
  const text = map.mappings;
  let lines = 1;
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) === 0x3b) lines++;
  index = new Int32Array(3 * lines);
  const fields = [0, 0, 0, 0, 0];
  let line = 0;
  let originalLine = 0;
  let originalColumn = 0;
  let i = 0;
  index[0] = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x3b) {
      line++;
      i++;
      index[3 * line] = i;
      index[3 * line + 1] = originalLine;
      index[3 * line + 2] = originalColumn;
    } else if (c === 0x2c) {
      i++;
    } else {
      const count = readSegment(text, i, fields);
      i = fields[4];
      if (count >= 4) {
        originalLine += fields[2];
        originalColumn += fields[3];
      }
    }
  }
  lineIndexes.set(map, index);
  return index;
}

/** Decode one segment at `i` into fields[0..3]; fields[4] is where it ends. Returns its field count. */
function readSegment(text: string, i: number, fields: number[]): number {
  let count = 0;
  let value = 0;
  let shift = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x2c || c === 0x3b) break;
    const digit = c < 128 ? DIGIT_CODE[c] : -1;
    i++;
    if (digit < 0) continue;
    value += (digit & 31) * 2 ** shift;
    if (digit & 32) {
      shift += 5;
    } else {
      if (count < 4) fields[count] = value % 2 === 1 ? -((value - 1) / 2) : value / 2;
      count++;
      value = 0;
      shift = 0;
    }
  }
  fields[4] = i;
  return count;
}

/** One generated line's triples (0-based), decoded from the encoded map alone. */
function encodedLine(map: EncodedLineMap, line: number): number[] | undefined {
  const index = lineIndex(map);
  if (line < 0 || 3 * line >= index.length) return undefined;
  const text = map.mappings;
  let i = index[3 * line];
  let originalLine = index[3 * line + 1];
  let originalColumn = index[3 * line + 2];
  let generatedColumn = 0;
  const shift = map.firstLineShift ?? 0;
  const segments: number[] = [];
  const fields = [0, 0, 0, 0, 0];
  while (i < text.length && text.charCodeAt(i) !== 0x3b) {
    if (text.charCodeAt(i) === 0x2c) {
      i++;
      continue;
    }
    const count = readSegment(text, i, fields);
    i = fields[4];
    generatedColumn += fields[0];
    if (count >= 4) {
      originalLine += fields[2];
      originalColumn += fields[3];
      const column = originalLine === 0 ? Math.max(0, originalColumn - shift) : originalColumn;
      segments.push(generatedColumn, originalLine, column);
    }
  }
  return segments;
}

/**
 * 1-based line and column in, 1-based line and column out; undefined when nothing maps there.
 * `decoded` keeps an encoded map's lines decoded for the caller's next positions (remapStack).
 */
export function originalPosition(
  map: LineMap,
  line: number,
  column: number,
  decoded?: Map<number, number[] | undefined>,
): { line: number; column: number } | undefined {
  let segments: number[] | undefined;
  if (Array.isArray(map)) segments = map[line - 1];
  else if (decoded?.has(line)) segments = decoded.get(line);
  else {
    segments = encodedLine(map, line - 1);
    decoded?.set(line, segments);
  }
  if (!segments || segments.length === 0) return undefined;
  // The last segment at or before the column (binary search: a minified line has thousands).
  let low = 0;
  let high = segments.length / 3 - 1;
  let best = 0;
  while (low <= high) {
    const mid = (low + high) >> 1;
    if (segments[3 * mid] <= column - 1) {
      best = 3 * mid;
      low = mid + 1;
    } else high = mid - 1;
  }
  return { line: segments[best + 1] + 1, column: segments[best + 2] + 1 };
}

/**
 * Rewrite `file:line:col` positions of `filename` in a stack through the map. A frame line at a
 * position the map does not cover is dropped: it is code the guest did not write (the script
 * form's wrapper, esbuild's helpers), and its line number (32 for a 4-line module) only misleads;
 * `keepUnmapped` keeps it, for text that is not only a stack (a log line).
 */
export function remapStack(stack: string, filename: string, map: LineMap, keepUnmapped = false): string {
  const escaped = filename.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  // QuickJS frames may carry a line without a column. Not inside a longer name: frames of
  // "mylib" or "a/lib" are not frames of "lib" (they were remapped through its map twice), and
  // `a:1:4:32` is a frame of "a:1", not of "a" (line 1, column 4, then a stray ":32").
  const position = new RegExp(`(?<![\\w$./-])${escaped}:(\\d+)(?::(\\d+))?(?!:?\\d)`, "g");
  const lines = stack.split("\n");
  const out: string[] = [];
  // Each generated line decoded once: a guest that repeated one frame on a long minified line
  // 5,000 times had the host decode that line 5,000 times (its event loop held 5.5 s).
  const decoded = new Map<number, number[] | undefined>();
  for (const line of lines) {
    let unmapped = false;
    const mapped = line.replace(position, (whole, lineText: string, column?: string) => {
      const found = originalPosition(map, Number(lineText), Number(column ?? 1), decoded);
      if (!found) {
        unmapped = true;
        return whole;
      }
      return column === undefined ? `${filename}:${found.line}` : `${filename}:${found.line}:${found.column}`;
    });
    if (unmapped && !keepUnmapped && /^\s+at /.test(line)) continue;
    out.push(mapped);
  }
  return out.join("\n");
}
