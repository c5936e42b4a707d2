/**
 * Map positions in esbuild's output back to the guest's own text, so stack traces point at the
 * lines the caller wrote. Decodes the "mappings" field of a version 3 source map (Base64 VLQ).
 */
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const DIGIT = new Map([...B64].map((c, i) => [c, i]));

/** segments[generatedLine] = [generatedColumn, originalLine, originalColumn] triples, sorted by column. */
export type LineMap = number[][];

export function decodeMappings(mappings: string): LineMap {
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

/** 1-based line and column in, 1-based line and column out; undefined when nothing maps there. */
export function originalPosition(map: LineMap, line: number, column: number): { line: number; column: number } | undefined {
  const segments = map[line - 1];
  if (!segments || segments.length === 0) return undefined;
  let best = 0;
  for (let i = 0; i < segments.length; i += 3) {
    if (segments[i] <= column - 1) best = i;
    else break;
  }
  return { line: segments[best + 1] + 1, column: segments[best + 2] + 1 };
}

/**
 * Rewrite `file:line:col` positions of `filename` in a stack through the map. A frame line at a
 * position the map does not cover is dropped: it is code the guest did not write (the script
 * form's wrapper, esbuild's helpers), and its line number (32 for a 4-line module) only misleads.
 */
export function remapStack(stack: string, filename: string, map: LineMap): string {
  const escaped = filename.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  // QuickJS frames may carry a line without a column. Not inside a longer name: frames of
  // "mylib" or "a/lib" are not frames of "lib" (they were remapped through its map twice).
  const position = new RegExp(`(?<![\\w$./-])${escaped}:(\\d+)(?::(\\d+))?`, "g");
  const lines = stack.split("\n");
  const out: string[] = [];
  for (const line of lines) {
    let unmapped = false;
    const mapped = line.replace(position, (whole, lineText: string, column?: string) => {
      const found = originalPosition(map, Number(lineText), Number(column ?? 1));
      if (!found) {
        unmapped = true;
        return whole;
      }
      return column === undefined ? `${filename}:${found.line}` : `${filename}:${found.line}:${found.column}`;
    });
    if (unmapped && /^\s+at /.test(line)) continue;
    out.push(mapped);
  }
  return out.join("\n");
}
