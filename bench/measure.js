// Measurement helpers shared by every benchmark: samples, percentiles, ratios, throughput.

/** A ~750-byte analytics event, as the warm-path targets describe. */
export const EVENT = {
  type: "page_view",
  userId: "u_5f2c9a7e41d04b6c",
  anonymousId: "a_0b7d8e3f-9c21-4e5a-8f6b-2d1c0e9a7b34",
  sessionId: "s_20261130_0007_9f3e",
  url: "https://shop.example.com/products/widgets/blue-widget-2000?utm_source=newsletter&utm_campaign=winter",
  referrer: "https://www.example-search.com/search?q=blue+widget+2000&source=hp",
  userAgent: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36",
  timestamp: "2026-11-30T00:07:52.123Z",
  locale: "de-DE",
  geo: { country: "DE", region: "BE", city: "Berlin" },
  properties: {
    productId: "W-2000-BLU",
    category: "widgets",
    price: 19.99,
    currency: "EUR",
    quantity: 2,
    tags: ["sale", "winter", "blue"],
    experiment: { id: "exp_checkout_v3", variant: "B" },
  },
  context: { library: "analytics.js", version: "4.1.0" },
};

/** Run `fn` n times sequentially (after a warm-up of n/10) and return the durations in ms. */
export async function sample(n, fn) {
  for (let i = 0; i < Math.max(5, Math.floor(n / 10)); i++) await fn();
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    await fn();
    out[i] = performance.now() - started;
  }
  return out.sort();
}

/**
 * Call `fn` 2,000 times back to back before a stream of its calls is sampled. A stream reaches a
 * steady state only that late (measured: a polled process-host stream 312 -> 119 us p50 over its
 * first 2,000 calls; a v8 one 88 -> 49 us over two rounds of 3,000) while V8 tiers up the host's
 * code and busy-polling and shared-memory channels settle in.
 */
export async function warmStream(fn) {
  for (let i = 0; i < 2000; i++) await fn();
}

/** `n` samples of a stream of `fn`'s calls, back to back, after its warm-up (warmStream). */
export async function sampleStream(n, fn) {
  await warmStream(fn);
  return sample(n, fn);
}

/**
 * Sample several functions interleaved (a, b, c, a, b, c, ...), so drift in the machine's state
 * (frequency, the other core waking) hits all of them alike and their ratio stays fair.
 */
export async function sampleInterleaved(n, fns, { gapMs = 0 } = {}) {
  for (let i = 0; i < Math.max(5, Math.floor(n / 10)); i++) for (const fn of fns) await fn();
  const out = fns.map(() => new Float64Array(n));
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < fns.length; k++) {
      // A gap before (not inside) the measured call: a paced request stream.
      if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      const started = performance.now();
      await fns[k]();
      out[k][i] = performance.now() - started;
    }
  }
  return out.map((a) => a.sort());
}

export function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

function ms(value) {
  return value < 1 ? `${(value * 1000).toFixed(1)} us` : `${value.toFixed(3)} ms`;
}

/** Print p50/p90/p99 of `sorted`, and the p50 ratio against `baseline` when given. */
export function report(label, sorted, baseline, { target, vs = "raw" } = {}) {
  const p50 = percentile(sorted, 0.5);
  const parts = [`p50 ${ms(p50)}`, `p90 ${ms(percentile(sorted, 0.9))}`, `p99 ${ms(percentile(sorted, 0.99))}`];
  if (baseline) parts.push(`ratio ${(p50 / percentile(baseline, 0.5)).toFixed(2)}x ${vs}`);
  if (target) parts.push(`target ${target}`);
  console.log(`  ${label.padEnd(48)} ${parts.join("   ")}`);
}

/** `size` analytics events, each its own object (no engine can profit from shared references). */
export function eventBatch(size) {
  return Array.from({ length: size }, () => structuredClone(EVENT));
}

/**
 * Events before a rate is measured: throughput is for a steady state, and every setup here
 * climbs to one over its first few hundred thousand events, far past a round of the run's own
 * length (which the quick bench's 20,000 events used to be). Measured 2026-12-04, rounds of
 * 100,000 events: cordon's v8 events one per call 85 -> 154 -> 188 -> 205 k/s (V8 optimizing the
 * host's code and the runtime's); raw isolated-vm's 32 per call ~200 k/s for its first ~5,600
 * crossings, then ~480 k/s (its 25 KB texts become external strings that fault in fresh pages
 * until the isolate's first full collection frees them: decision 019); the process host's
 * 33 -> 79 k/s one per call and 64 -> 118 k/s batched (the worker process warming up too).
 * 400,000 events is past each of those climbs; the rounds stop earlier after WARM_UP_MAX_MS.
 */
export const WARM_UP_EVENTS = 400_000;
const WARM_UP_MAX_MS = 15_000;

/**
 * Run `round` (which handles `eventsPerRound` events) until WARM_UP_EVENTS have been handled, at
 * least once, for at most about WARM_UP_MAX_MS.
 */
export async function warmUpRounds(eventsPerRound, round) {
  const begun = performance.now();
  let handled = 0;
  do {
    await round();
    handled += eventsPerRound;
  } while (handled < WARM_UP_EVENTS && performance.now() - begun < WARM_UP_MAX_MS);
}

/**
 * Events per second: `total` events, `inFlight` concurrent callers, `perCall` events per call,
 * after a warm-up of the same load (warmUpRounds). Also the CPU time this process spent per event
 * meanwhile, on every thread (its loop, isolate threads, QuickJS worker threads; not other
 * processes): with C cores, no setup can exceed C × 1,000,000 / cpuUs events a second, so a
 * target beyond that is a CPU budget, not a wait.
 */
export async function eventsPerSecond(total, inFlight, perCall, fn) {
  const calls = Math.ceil(total / perCall);
  let started = 0;
  const worker = async () => {
    while (started < calls) {
      started++;
      await fn();
    }
  };
  const round = () => {
    started = 0;
    return Promise.all(Array.from({ length: inFlight }, worker));
  };
  await warmUpRounds(calls * perCall, round);
  return measureRate(calls * perCall, round);
}

/** The rate of `events` handled by `run` (sync or async), and this process's CPU time per event meanwhile. */
export async function measureRate(events, run) {
  const cpu = process.cpuUsage();
  const begin = performance.now();
  await run();
  const seconds = (performance.now() - begin) / 1000;
  const used = process.cpuUsage(cpu);
  return { perSecond: events / seconds, cpuUs: (used.user + used.system) / events };
}

/** "115,527/s (14.9 us CPU each)": a rate and, when measured, its CPU time per event. */
export function rate({ perSecond, cpuUs }, withCpu = true) {
  const perSecondText = `${Math.round(perSecond).toLocaleString("en-US")}/s`;
  return withCpu ? `${perSecondText} (${cpuUs.toFixed(1)} us CPU each)` : perSecondText;
}

/** "1.67": how many times `a`'s rate is `b`'s (two measureRate results). */
export function ratio(a, b) {
  return (a.perSecond / b.perSecond).toFixed(2);
}

let turningUntil = 0;
let turning = false;
const turn = () => {
  if (performance.now() < turningUntil) setImmediate(turn);
  else turning = false;
};

/**
 * Keep this thread's loop turning for `ms` from now (a setImmediate chain: each turn polls I/O
 * without sleeping), as cordon's busy-polling does, so what arrives meanwhile is read at once.
 */
export function keepTurning(ms) {
  turningUntil = performance.now() + ms;
  if (turning) return;
  turning = true;
  setImmediate(turn);
}

export function section(title) {
  console.log(`\n${title}`);
}
