/**
 * How far a frame of one tick's calls ("prefix-calls") or answers ("values") may grow. Its texts
 * are joined as an engine crossing's are (core/joined-texts.ts).
 */
/** Texts longer than this travel in a frame of their own (a batch's frame stays far below the frame limit). */
export const MAX_BATCHED_TEXT_CHARS = 64 * 1024;
/** A batch this long is written at once rather than at the end of the tick. */
export const FLUSH_AT_CHARS = 1024 * 1024;
