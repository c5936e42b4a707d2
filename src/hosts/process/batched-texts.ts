/**
 * What a frame of one tick's calls ("prefix-calls") or answers ("values") carries its texts as,
 * and how far it may grow. The texts are codec text, which is JSON: every control character in it
 * is escaped, so U+0001 joins them unambiguously.
 */
const SEPARATOR = "\u0001";

/** Texts longer than this travel in a frame of their own (a batch's frame stays far below the frame limit). */
export const MAX_BATCHED_TEXT_CHARS = 64 * 1024;
/** A batch this long is written at once rather than at the end of the tick. */
export const FLUSH_AT_CHARS = 1024 * 1024;

export function joinTexts(texts: string[]): string {
  return texts.join(SEPARATOR);
}

/** `joined`'s texts, or undefined when there are not exactly `count` of them. */
export function splitTexts(joined: string, count: number): string[] | undefined {
  const texts = joined.split(SEPARATOR);
  return texts.length === count ? texts : undefined;
}
