/**
 * Many codec texts as one string: the arguments or outcomes of one engine crossing, the calls or
 * answers of one process-host frame. Codec text is JSON, which escapes every control character,
 * so U+0001 never occurs in it raw and joins texts unambiguously. (The guest runtime, which
 * imports nothing, splits and joins at the same character: engines/guest/runtime.ts.)
 */
export const TEXT_SEPARATOR = "\u0001";

/** One string for `texts` (a single text as it is: no copy). */
export function joinTexts(texts: readonly string[]): string {
  return texts.length === 1 ? texts[0] : texts.join(TEXT_SEPARATOR);
}

/** `joined` with each of its texts replaced by `map`'s answer for it. */
export function mapTexts(joined: string, map: (text: string) => string): string {
  return joined.split(TEXT_SEPARATOR).map(map).join(TEXT_SEPARATOR);
}

/**
 * `joined`'s texts, or undefined when there are not exactly `count` of them (a peer's frame that
 * does not add up: even one text is split, so a raw separator in it is caught).
 */
export function splitTexts(joined: string, count: number): string[] | undefined {
  const texts = joined.split(TEXT_SEPARATOR);
  return texts.length === count ? texts : undefined;
}
