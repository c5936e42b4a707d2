// What a v8 guest's synchronous crossing costs the machine, beside what cordon charges it
// (src/engines/v8/host-time.ts, CROSSING_NS). The cost moves with the VM's state (59-114 µs of
// process CPU a crossing on 2026-12-04): read this section before changing the charge.
import { createRequire } from "node:module";
import { createSandbox } from "../dist/index.js";
import { percentile, report, sampleStream, section } from "./measure.js";

const ivm = createRequire(import.meta.url)("isolated-vm");

function processCpuUs() {
  const { user, system } = process.cpuUsage();
  return user + system;
}

/** Raw isolated-vm: a guest calling a do-nothing synchronous Callback for `ms`. */
async function rawCrossings(ms) {
  const isolate = new ivm.Isolate({ memoryLimit: 64 });
  const context = await isolate.createContext();
  let crossings = 0;
  context.global.setSync(
    "cross",
    new ivm.Callback(() => {
      crossings++;
    }),
  );
  const cpu = processCpuUs();
  const isolateCpu = isolate.cpuTime;
  await context.eval(`{ const end = Date.now() + ${ms}; while (Date.now() < end) cross(); }`);
  const result = {
    crossings,
    processUs: (processCpuUs() - cpu) / crossings,
    isolateUs: Number(isolate.cpuTime - isolateCpu) / 1000 / crossings,
  };
  isolate.dispose();
  return result;
}

/**
 * cordon: a guest looping `n` times over `body` (a statement of `i`); process CPU and charge per
 * loop. `new URL()` crosses synchronously each time (the host parses it).
 */
async function cordonLoop(sandbox, n, body) {
  const cpu = processCpuUs();
  const result = await sandbox.run({
    code: `export default () => { for (let i = 0; i < ${n}; i++) { ${body} } }`,
    limits: { cpuTimeMs: 30_000, wallTimeMs: 60_000 },
  });
  if (!result.ok) throw new Error(`the loop failed: ${result.error.code} ${result.error.message}`);
  return { processUs: (processCpuUs() - cpu) / n, chargedUs: (result.stats.cpuMs * 1000) / n };
}

const URL_LOOP = 'new URL("https://example.com/a?n=" + i);';
const TIMER_LOOP = "clearTimeout(setTimeout(() => {}, 1000));";

export async function benchCrossingCharge({ quick }) {
  section("v8: a synchronous crossing, its cost and its charge");
  const raw = await rawCrossings(quick ? 300 : 1000);
  console.log(
    `  raw isolated-vm, a do-nothing Callback: ${raw.processUs.toFixed(1)} us of process CPU a crossing (${raw.crossings.toLocaleString("en-US")} crossings), the isolate's clock sees ${raw.isolateUs.toFixed(1)} us`,
  );
  const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
  await cordonLoop(sandbox, 200, URL_LOOP); // warm-up
  const cordon = await cordonLoop(sandbox, quick ? 2000 : 10_000, URL_LOOP);
  console.log(
    `  cordon, a new URL() loop:              ${cordon.processUs.toFixed(1)} us of process CPU a crossing, charged ${cordon.chargedUs.toFixed(1)} us   cost/charge ${(cordon.processUs / cordon.chargedUs).toFixed(2)}x (above 1: the guest gets more than its CPU limit)`,
  );
  // Timer changes go through the outbox (decision 021): until 2026-12-04 a pair was two crossings.
  const timers = await cordonLoop(sandbox, quick ? 20_000 : 100_000, TIMER_LOOP);
  console.log(
    `  cordon, setTimeout + clearTimeout:     ${timers.processUs.toFixed(1)} us of process CPU a pair, charged ${timers.chargedUs.toFixed(1)} us (no crossing but one per 512 pairs, the outbox full)`,
  );

  // Where it showed: each console.* line of a v8 guest was such a crossing (2026-12-04: a warm
  // call's p50 10.8 µs quiet, 42.9 µs with one line, 69.2 µs with three). Lines now go through
  // the outbox (engines/v8/outbox.ts); a line over 2,048 characters still crosses.
  const prefix = await sandbox.prepare({
    code: [
      "export const quiet = (n) => n + 1;",
      "export const loud = (n) => { console.log('call', n); return n + 1 };",
      "export const three = (n) => { console.log('a', n); console.info('b', n); console.warn('c', n); return n + 1 };",
      "const long = 'x'.repeat(3000);",
      "export const crossing = (n) => { console.log(long, n); return n + 1 };",
    ].join("\n"),
  });
  const n = quick ? 1000 : 5000;
  // The first stream after the timer loop reads slow (its polling pauses left behind): a spare one first.
  await backToBack(prefix, "quiet", n);
  const quiet = await backToBack(prefix, "quiet", n);
  const loud = await backToBack(prefix, "loud", n);
  const three = await backToBack(prefix, "three", n);
  const crossing = await backToBack(prefix, "crossing", n);
  report("cordon prefix.call, back to back, quiet", quiet.times);
  report("  the same handler logging one line", loud.times, quiet.times, { vs: "quiet" });
  report("  logging three lines", three.times, quiet.times, { vs: "quiet" });
  report("  logging one 3,000-character line (crosses)", crossing.times, quiet.times, { vs: "quiet" });
  console.log(
    `  charged a call: quiet ${quiet.chargedUs.toFixed(1)} us, one line ${loud.chargedUs.toFixed(1)} us, three ${three.chargedUs.toFixed(1)} us, one crossing line ${crossing.chargedUs.toFixed(1)} us`,
  );
  await prefix.dispose();
  await sandbox.dispose();
}

/** `n` sequential calls of `name` after a warmed stream: sorted times (ms) and the median charge (us). */
async function backToBack(prefix, name, n) {
  const charges = [];
  const call = async () => {
    const result = await prefix.call({ export: name, args: [1] });
    if (!result.ok) throw new Error(`${name} failed: ${result.error.code} ${result.error.message}`);
    charges.push(result.stats.cpuMs);
  };
  const times = await sampleStream(n, call);
  const measured = charges.slice(-n).sort((a, b) => a - b);
  return { times, chargedUs: percentile(measured, 0.5) * 1000 };
}
