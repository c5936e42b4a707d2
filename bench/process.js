// The process host's benchmarks, beside the in-process host's figures measured in the same run.
import { spawn } from "node:child_process";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { createSandbox } from "../dist/index.js";
import {
  EVENT,
  eventBatch,
  eventsPerSecond,
  keepTurning,
  rate,
  ratio,
  report,
  sample,
  sampleInterleaved,
  section,
  warmStream,
} from "./measure.js";

/**
 * Round trips of one call-sized frame through the pipes of a child Node process that echoes it
 * (bench/pipe-echo.js), back to back; `polled`: both loops keep turning between them, as with
 * workers.busyPollMs.
 */
async function rawPipeRoundTrip(n, polled) {
  const echo = fileURLToPath(new URL("./pipe-echo.js", import.meta.url));
  const child = spawn(process.execPath, [echo, polled ? "poll" : "sleep"], { stdio: ["pipe", "pipe", "inherit"] });
  const frame = Buffer.from(
    `${JSON.stringify({ t: "prefix-call", id: 1, prefix: 1, path: "handle", argsText: ' [{"n":1}]' })}\n`,
  );
  let answered = () => {};
  child.stdout.on("data", () => answered());
  const roundTrip = () =>
    new Promise((resolve) => {
      answered = resolve;
      child.stdin.write(frame);
      if (polled) keepTurning(1);
    });
  await warmStream(roundTrip);
  const measured = await sample(n, roundTrip);
  child.kill();
  return measured;
}

export async function benchProcess({ quick }) {
  const n = quick ? 200 : 1000;
  const inprocess = await createSandbox({ engine: "v8", host: "inprocess" });
  const process = await createSandbox({ engine: "v8", host: "process" });
  await process.run({ code: "export default 0" }); // the worker is up
  await new Promise((r) => setTimeout(r, 300));

  section("process host (v8): one-off run of a trivial module");
  const [inRun, procRun] = await sampleInterleaved(
    Math.floor(n / 2),
    [() => inprocess.run({ code: "export default () => 1" }), () => process.run({ code: "export default () => 1" })],
    { gapMs: 5 },
  );
  report("in-process sandbox.run", inRun);
  report("process host sandbox.run", procRun, inRun, { target: "p50 <= 2 ms", vs: "in-process" });

  section("process host (v8): warm call of a trivial handler");
  const handlers =
    "export function handle(e) { return e.n + 1 }\nexport function track(e) { return e.type.length }\nexport function batch(events) { let n = 0; for (const e of events) n += e.type.length; return n }";
  const inPrefix = await inprocess.prepare({ code: handlers });
  const procPrefix = await process.prepare({ code: handlers });
  const [inCall, procCall] = await sampleInterleaved(n * 2, [
    () => inPrefix.call({ export: "handle", args: [{ n: 1 }] }),
    () => procPrefix.call({ export: "handle", args: [{ n: 1 }] }),
  ]);
  report("in-process prefix.call", inCall);
  report("process host prefix.call", procCall, inCall, { target: "p50 <= 50 us", vs: "in-process" });
  // Back to back (a stream). A quick export under a CPU limit of at most 100 ms runs on the
  // worker's own thread (decision 012); workers.busyPollMs polls the pipe on both sides, off by
  // default because on 2 cores it trades p99 for p50.
  const short = { cpuTimeMs: 50 };
  const polled = await createSandbox({ engine: "v8", host: "process", workers: { busyPollMs: 1, max: 1 } });
  const polledPrefix = await polled.prepare({ code: handlers });
  const streams = {
    "in-process": () => inPrefix.call({ export: "handle", args: [{ n: 1 }] }),
    "default limits": () => procPrefix.call({ export: "handle", args: [{ n: 1 }] }),
    "cpuTimeMs: 50": () => procPrefix.call({ export: "handle", args: [{ n: 1 }], limits: short }),
    "polled, default limits": () => polledPrefix.call({ export: "handle", args: [{ n: 1 }] }),
    "polled, cpuTimeMs: 50": () => polledPrefix.call({ export: "handle", args: [{ n: 1 }], limits: short }),
  };
  const measured = {};
  for (const call of Object.values(streams)) await warmStream(call);
  for (const [name, call] of Object.entries(streams)) measured[name] = await sample(n * 2, call);
  report("in-process, back to back", measured["in-process"]);
  report("process host, back to back, default limits", measured["default limits"], measured["in-process"], {
    vs: "in-process",
  });
  report("  a quick call on the worker's thread", measured["cpuTimeMs: 50"], measured["default limits"], {
    vs: "default limits",
  });
  report("  workers.busyPollMs: 1, default limits", measured["polled, default limits"], measured["default limits"], {
    vs: "default limits",
  });
  report("  workers.busyPollMs: 1, quick call", measured["polled, cpuTimeMs: 50"], measured["default limits"], {
    target: "p50 <= 50 us",
    vs: "default limits",
  });
  await polled.dispose();
  // The floor under every figure above: a frame of a call's size to another Node process and back.
  const pipeSleeping = await rawPipeRoundTrip(n * 2, false);
  const pipePolled = await rawPipeRoundTrip(n * 2, true);
  report("raw pipe round trip to a Node process", pipeSleeping);
  report("raw pipe round trip, both sides polled", pipePolled, pipeSleeping);

  section(`process host (v8): ~${JSON.stringify(EVENT).length}-byte analytics events`);
  const total = quick ? 20_000 : 100_000;
  const batch = eventBatch(32);
  const inSingle = await eventsPerSecond(total, 64, 1, () => inPrefix.call({ export: "track", args: [EVENT] }));
  const procSingle = await eventsPerSecond(total, 64, 1, () => procPrefix.call({ export: "track", args: [EVENT] }));
  const inBatched = await eventsPerSecond(total, 8, 32, () => inPrefix.call({ export: "batch", args: [batch] }));
  const procBatched = await eventsPerSecond(total, 8, 32, () => procPrefix.call({ export: "batch", args: [batch] }));
  // The workers' CPU is not this process's: only the rates compare here.
  console.log(
    `  one per call, 64 in flight: in-process ${rate(inSingle, false)}   process ${rate(procSingle, false)}   ratio ${ratio(procSingle, inSingle)}   target >= 100,000/s`,
  );
  console.log(
    `  32 per call, 8 in flight:   in-process ${rate(inBatched, false)}   process ${rate(procBatched, false)}   ratio ${ratio(procBatched, inBatched)}   target >= 400,000/s`,
  );

  await inPrefix.dispose();
  await procPrefix.dispose();
  await inprocess.dispose();
  await process.dispose();

  await benchWorkerStarts(quick);
}

/**
 * What starting a worker costs the host's event loop. Node's spawn forks the caller (libuv, on
 * Linux), and the loop waits while the fork copies its page tables. Raw: Node processes spawned
 * from this one. cordon: workers its pool starts through its spawner process (once that is
 * ready: src/core/spawner.ts), each replacing one killed from outside. The loop's delay
 * is watched throughout both, the children's start-up included (they compete for the cores).
 */
async function benchWorkerStarts(quick) {
  section("process host: the host's event loop while worker processes start");
  const starts = quick ? 6 : 20;
  const echo = fileURLToPath(new URL("./pipe-echo.js", import.meta.url));
  const forks = [];
  const rawDelay = monitorEventLoopDelay({ resolution: 1 });
  rawDelay.enable();
  for (let i = 0; i < starts; i++) {
    const started = performance.now();
    const child = spawn(process.execPath, [echo, "sleep"], { stdio: ["pipe", "pipe", "inherit"] });
    forks.push(performance.now() - started);
    await new Promise((r) => setTimeout(r, 300)); // its start-up, as a worker's
    child.kill();
    await new Promise((r) => child.once("exit", r));
  }
  rawDelay.disable();
  forks.sort((a, b) => a - b);
  const rssMb = Math.round(globalThis.process.memoryUsage().rss / 1e6);

  const sandbox = await createSandbox({ engine: "v8", host: "process", workers: { min: 1 } });
  await sandbox.run({ code: "export default 0" });
  await new Promise((r) => setTimeout(r, 1000)); // the spawner is ready
  const startedPid = () => (sandbox.stats().workers ?? []).find((w) => w.pid > 0)?.pid;
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  for (let i = 0; i < starts; i++) {
    const victim = startedPid();
    globalThis.process.kill(victim, "SIGKILL");
    while (startedPid() === undefined || startedPid() === victim) await new Promise((r) => setTimeout(r, 5));
    await sandbox.run({ code: "export default () => 1" });
  }
  delay.disable();
  await sandbox.dispose();
  const ms = (ns) => (ns / 1e6).toFixed(1);
  console.log(
    `  raw spawn of a Node process (this process ${rssMb} MB resident): spawn() blocks p50 ${forks[Math.floor(starts / 2)].toFixed(1)} ms, max ${forks[starts - 1].toFixed(1)} ms; loop delay over ${starts} starts max ${ms(rawDelay.max)} ms`,
  );
  console.log(
    `  cordon, ${starts} workers replaced through its spawner: loop delay p99 ${ms(delay.percentile(99))} ms, max ${ms(delay.max)} ms`,
  );

  // Recycling: a worker's successor starts in its last tenth of runs (pool.ts), so the run after
  // its last finds a started worker (it waited ~0.5 s for one before). Runs paced 120 ms apart,
  // beside the same runs on a pool that never recycles.
  const paced = quick ? 100 : 300;
  const recycling = await createSandbox({ engine: "v8", host: "process", workers: { maxRunsPerWorker: 50 } });
  const steady = await createSandbox({ engine: "v8", host: "process" });
  await recycling.run({ code: "export default 0" });
  await steady.run({ code: "export default 0" });
  await new Promise((r) => setTimeout(r, 1000));
  const [recycled, kept] = await sampleInterleaved(
    paced,
    [() => recycling.run({ code: "export default () => 1" }), () => steady.run({ code: "export default () => 1" })],
    { gapMs: 60 },
  );
  await recycling.dispose();
  await steady.dispose();
  report("one-off, paced, never recycled", kept);
  report("one-off, paced, recycled every 50 runs", recycled, kept, { vs: "never recycled" });
  console.log(`  longest: never recycled ${kept.at(-1).toFixed(1)} ms, recycled every 50 runs ${recycled.at(-1).toFixed(1)} ms`);
}
