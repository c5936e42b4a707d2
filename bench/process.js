// The process host's benchmarks, beside the in-process host's figures measured in the same run.
import { createSandbox } from "../dist/index.js";
import { EVENT, eventsPerSecond, report, sample, sampleInterleaved, section, warmStream } from "./measure.js";

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

  section(`process host (v8): ~${JSON.stringify(EVENT).length}-byte analytics events`);
  const total = quick ? 20_000 : 100_000;
  const batch = Array.from({ length: 32 }, () => EVENT);
  const inSingle = await eventsPerSecond(total, 64, 1, () => inPrefix.call({ export: "track", args: [EVENT] }));
  const procSingle = await eventsPerSecond(total, 64, 1, () => procPrefix.call({ export: "track", args: [EVENT] }));
  const inBatched = await eventsPerSecond(total, 8, 32, () => inPrefix.call({ export: "batch", args: [batch] }));
  const procBatched = await eventsPerSecond(total, 8, 32, () => procPrefix.call({ export: "batch", args: [batch] }));
  const fmt = (v) => Math.round(v).toLocaleString("en-US");
  console.log(
    `  one per call, 64 in flight: in-process ${fmt(inSingle)}/s   process ${fmt(procSingle)}/s   ratio ${(procSingle / inSingle).toFixed(2)}   target >= 100,000/s`,
  );
  console.log(
    `  32 per call, 8 in flight:   in-process ${fmt(inBatched)}/s   process ${fmt(procBatched)}/s   ratio ${(procBatched / inBatched).toFixed(2)}   target >= 400,000/s`,
  );

  await inPrefix.dispose();
  await procPrefix.dispose();
  await inprocess.dispose();
  await process.dispose();
}
