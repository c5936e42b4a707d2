/**
 * A body as UTF-8 text, or undefined once it passes `max` bytes; the rest is not read (leaving the
 * loop cancels a web stream and destroys a Node one). Counted as the bytes arrive: a chunked body
 * has no length to trust.
 */
export async function readCapped(chunks: AsyncIterable<Uint8Array>, max: number): Promise<string | undefined> {
  const kept: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of chunks) {
    size += chunk.byteLength;
    if (size > max) return undefined;
    kept.push(chunk);
  }
  return Buffer.concat(kept).toString("utf8");
}
