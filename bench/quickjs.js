// The quickjs engine's benchmarks: cordon beside raw quickjs-emscripten and
// @sebastianwessel/quickjs doing the same work, same process, same WASM build.
import { loadQuickJs } from "@sebastianwessel/quickjs";
import variant from "@jitl/quickjs-wasmfile-release-sync";
import { newQuickJSWASMModuleFromVariant } from "quickjs-emscripten-core";
import { createSandbox } from "../dist/index.js";
import {
  EVENT,
  eventBatch,
  eventsPerSecond,
  measureRate,
  rate,
  ratio,
  report,
  sampleInterleaved,
  sampleStream,
  section,
  warmUpRounds,
} from "./measure.js";
import { benchQuickJSStart } from "./quickjs-start.js";
import { startRawQuickJSThread } from "./raw-quickjs-thread.js";

/** Raw quickjs-emscripten: runtime + context + eval + call, on this thread (it blocks it). */
function rawOneOff(QuickJS) {
  const runtime = QuickJS.newRuntime();
  const vm = runtime.newContext();
  const fn = vm.unwrapResult(vm.evalCode("(function () { return 1 })"));
  const result = vm.unwrapResult(vm.callFunction(fn, vm.undefined));
  const value = vm.getNumber(result);
  result.dispose();
  fn.dispose();
  vm.dispose();
  runtime.dispose();
  return value;
}

export async function benchQuickJS({ quick }) {
  const n = quick ? 200 : 1000;
  const QuickJS = await newQuickJSWASMModuleFromVariant(variant);
  const { runSandboxed } = await loadQuickJs(variant);
  const sandbox = await createSandbox({ engine: "quickjs", host: "inprocess" });
  await new Promise((r) => setTimeout(r, 500)); // let the spare instances fill

  section("quickjs: one-off run of a trivial module");
  // A service that runs one-offs has run many: the host's code is optimized by then. Without
  // this, the few warm-up rounds below leave most of cordon's per-run JavaScript (and raw's
  // handle bookkeeping) interpreted, and the figures describe a cold start instead.
  const warmUps = quick ? 300 : 1500;
  const rawThread = await startRawQuickJSThread();
  for (let i = 0; i < warmUps; i++) {
    rawOneOff(QuickJS);
    await rawThread.run();
    await sandbox.run({ code: "export default () => 1" });
    // Let the spares keep up (one takes ~12 ms to make on a worker thread).
    if (i % 4 === 3) await new Promise((r) => setTimeout(r, 3));
  }
  // Paced like a request stream (a run every 20 ms): spares are refilled between runs, as they
  // are at any load below the workers' capacity. Back-to-back runs are throughput-bound instead.
  const [raw, rawOnThread, cordon] = await sampleInterleaved(
    Math.floor(n / 2),
    [async () => rawOneOff(QuickJS), rawThread.run, () => sandbox.run({ code: "export default () => 1" })],
    { gapMs: 20 },
  );
  await rawThread.close();
  // Measured on its own: its 5-8 ms runs (a WASM module each) between the other two moved
  // cordon's p50 from 0.78-0.93 to 0.98-1.05 ms here (two runs each), raw's much less.
  const wesselRun = () => runSandboxed(async ({ evalCode }) => evalCode("export default 1"));
  const [wessel] = await sampleInterleaved(Math.floor(n / 4), [wesselRun], { gapMs: 20 });
  report("raw quickjs-emscripten (runtime+context+eval+call)", raw);
  report("@sebastianwessel/quickjs runSandboxed", wessel, raw);
  // The in-process host runs QuickJS on worker threads (a spinning guest must not block the
  // caller): two thread hops, and a thread that slept since the last run, before cordon's code.
  report("raw, on a worker thread (runtime made ahead)", rawOnThread, raw);
  report(`cordon sandbox.run (worker, ${warmUps} runs before)`, cordon, raw, { target: "p50 <= 0.5 ms" });
  // Back to back, each run also pays for the spare that replaces the one it took (made on a
  // worker thread: a copy of a booted instance's memory, decision 013). Printed as runs per second too.
  const [rawBack, cordonBack] = await sampleInterleaved(Math.floor(n / 2), [
    async () => rawOneOff(QuickJS),
    () => sandbox.run({ code: "export default () => 1" }),
  ]);
  const sum = (sorted) => sorted.reduce((total, ms) => total + ms, 0);
  report("cordon sandbox.run, back to back", cordonBack, rawBack);
  console.log(
    `  back to back: cordon ${Math.round((cordonBack.length * 1000) / sum(cordonBack))} runs/s, raw ${Math.round((rawBack.length * 1000) / sum(rawBack))} runs/s (on this thread, blocking it)`,
  );

  section("quickjs: warm call of a trivial handler");
  const runtime = QuickJS.newRuntime();
  const vm = runtime.newContext();
  const handle = vm.unwrapResult(vm.evalCode("(function (json) { return JSON.parse(json).n + 1 })"));
  const prefix = await sandbox.prepare({
    code: "export function handle(e) { return e.n + 1 }\nexport function track(e) { return e.type.length }\nexport function batch(events) { let n = 0; for (const e of events) n += e.type.length; return n }",
  });
  const unpolled = await createSandbox({ engine: "quickjs", host: "inprocess", busyPollMs: 0 });
  const unpolledPrefix = await unpolled.prepare({ code: "export function handle(e) { return e.n + 1 }" });
  const [rawCall, cordonUnpolled, cordonCall] = await sampleInterleaved(n * 2, [
    async () => {
      const arg = vm.newString('{"n":1}');
      const out = vm.unwrapResult(vm.callFunction(handle, vm.undefined, arg));
      arg.dispose();
      out.dispose();
    },
    () => unpolledPrefix.call({ export: "handle", args: [{ n: 1 }] }),
    () => prefix.call({ export: "handle", args: [{ n: 1 }] }),
  ]);
  report("raw callFunction (on this thread: blocks it)", rawCall);
  report("cordon prefix.call, busyPollMs: 0", cordonUnpolled, rawCall);
  report("cordon prefix.call (worker thread, polled)", cordonCall, rawCall);
  await unpolled.dispose();
  // A stream of calls, back to back (as in the v8 section): interleaved above, no cordon call is
  // part of a stream, and the first thousands run slower.
  const rawStream = async () => {
    const arg = vm.newString('{"n":1}');
    vm.unwrapResult(vm.callFunction(handle, vm.undefined, arg)).dispose();
    arg.dispose();
  };
  const cordonStream = () => prefix.call({ export: "handle", args: [{ n: 1 }] });
  const rawStreamed = await sampleStream(n * 2, rawStream);
  const cordonStreamed = await sampleStream(n * 2, cordonStream);
  report("raw callFunction, back to back", rawStreamed);
  report("cordon prefix.call, back to back", cordonStreamed, rawStreamed);

  section(`quickjs: ~${JSON.stringify(EVENT).length}-byte analytics events`);
  const total = quick ? 10_000 : 50_000;
  const batch = eventBatch(32);
  // Raw does the same work on this thread, one call after another (QuickJS is synchronous): the
  // event serialized per call, parsed in the context. It blocks this thread throughout and uses
  // one core; cordon's calls run on its worker threads (one per core).
  const track = vm.unwrapResult(vm.evalCode("(function (json) { return JSON.parse(json).type.length })"));
  const batchFn = vm.unwrapResult(
    vm.evalCode("(function (json) { let n = 0; for (const e of JSON.parse(json)) n += e.type.length; return n })"),
  );
  const rawEvents = async (fn, perCall, value) => {
    const calls = Math.ceil(total / perCall);
    const run = () => {
      for (let i = 0; i < calls; i++) {
        const arg = vm.newString(JSON.stringify(value));
        vm.unwrapResult(vm.callFunction(fn, vm.undefined, arg)).dispose();
        arg.dispose();
      }
    };
    await warmUpRounds(calls * perCall, run); // as cordon's below (eventsPerSecond)
    return measureRate(calls * perCall, run);
  };
  const rawSingle = await rawEvents(track, 1, EVENT);
  const rawBatched = await rawEvents(batchFn, 32, batch);
  const single = await eventsPerSecond(total, 64, 1, () => prefix.call({ export: "track", args: [EVENT] }));
  const batched = await eventsPerSecond(total, 8, 32, () => prefix.call({ export: "batch", args: [batch] }));
  console.log(
    `  one per call, 64 in flight:  raw ${rate(rawSingle)} (this thread, blocking)   cordon ${rate(single)}   ratio ${ratio(single, rawSingle)}`,
  );
  console.log(
    `  32 per call, 8 in flight:    raw ${rate(rawBatched)} (this thread, blocking)   cordon ${rate(batched)}   ratio ${ratio(batched, rawBatched)}`,
  );
  track.dispose();
  batchFn.dispose();

  handle.dispose();
  vm.dispose();
  runtime.dispose();
  await prefix.dispose();
  await sandbox.dispose();

  await benchQuickJSStart({ quick });
}
