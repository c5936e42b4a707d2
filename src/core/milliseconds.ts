/** Milliseconds rounded to the microsecond, as results, logs and service logs report them. */
export function roundToUs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/** Milliseconds since `started` (a `performance.now()` reading), to the microsecond. */
export function msSince(started: number): number {
  return roundToUs(performance.now() - started);
}
