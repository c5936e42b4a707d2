import { readFileSync, readdirSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { outcome } from "./results.js";

/**
 * A guest that loops one kind of crossing to the host as fast as it can, under a CPU limit far
 * below its wall limit. Whatever the host does for it (on v8 in process: on the host's own
 * thread, while the isolate's CPU clock is paused) is charged to its CPU time, so the loop ends
 * in ERR_CPU_TIMEOUT well before the wall limit. Uncharged, arming and clearing timers kept the
 * v8 host's thread busy for 1.5 s (1000 intervals of 0 ms: 1.7 s) within a 300 ms CPU limit,
 * ending only at the wall limit; a setTimeout(0) chain ran into the wall limit with 243 ms of
 * CPU charged and 740 ms of the host thread's spent.
 */
const CPU_MS = 200;
const WALL_MS = 6000;
/**
 * For the slow loops. A setTimeout(0) chain is charged 60-100 µs a timer and waits ~1.3 ms for
 * each, so 200 ms of CPU take 2.3-5.2 s (measured on quickjs in process, one sandbox: later runs
 * cost less per timer as the host's code warms up, so they take longer); CI at load ~4 saw 4.6-4.8 s.
 */
const SLOW_WALL_MS = 12_000;

/**
 * Each loop runs until a limit ends it. `net`: a capability, so that fetch exists. `slow`: the
 * loop waits between crossings (timers wait 1 ms at least), so its CPU time grows slowly.
 */
const LOOPS: { kind: string; code: string; net?: string[]; slow?: true }[] = [
  { kind: "console.log, small", code: `for (;;) console.log("x");` },
  // Past the log limits the runtime drops a line before it crosses.
  {
    kind: "console.* with large and many arguments",
    code: `const s = "y".repeat(1 << 19); const a = Array.from({ length: 2000 }, (_, i) => i);
      for (;;) { console.warn(s, s, s); console.error(...a); }`,
  },
  { kind: "setTimeout/clearTimeout churn", code: `for (;;) clearTimeout(setTimeout(() => {}, 1000));` },
  { kind: "setInterval/clearInterval churn", code: `for (;;) clearInterval(setInterval(() => {}, 1000));` },
  { kind: "a setTimeout(0) chain", code: `await new Promise(() => { const f = () => setTimeout(f, 0); f(); });`, slow: true },
  {
    kind: "1000 intervals of 0 ms",
    code: `for (let i = 0; i < 1000; i++) setInterval(() => {}, 0); await new Promise(() => {});`,
  },
  {
    kind: "1000 setTimeout(0) chains",
    code: `for (let i = 0; i < 1000; i++) { const f = () => setTimeout(f, 0); f(); } await new Promise(() => {});`,
  },
  { kind: "small URLs", code: `for (;;) new URL("http://a.test/x?y=1").searchParams.get("y");` },
  {
    kind: "port setters on a 1 MiB href",
    code: `const w = new URL("http://a.test/"); w.pathname = "\\u4e00".repeat(116000); for (let i = 0; ; i++) w.port = String(i % 60000);`,
  },
  { kind: "crypto.getRandomValues", code: `const b = new Uint8Array(65536); for (;;) crypto.getRandomValues(b);` },
  { kind: "crypto.randomUUID", code: `for (;;) crypto.randomUUID();` },
  {
    kind: "TextEncoder, atob, structuredClone, Headers, Response",
    code: `const e = new TextEncoder(), d = new TextDecoder(), o = { a: [1, 2], m: new Map([[1, 2]]) };
      for (;;) {
        d.decode(e.encode("hello".repeat(100))); atob(btoa("hello".repeat(100))); structuredClone(o);
        const r = new Response("x".repeat(1000), { headers: { a: "b" } }); new Headers(r.headers).get("a"); await r.text();
      }`,
  },
  // A host call: the host's work on it is not the guest's CPU (its count is bounded instead).
  {
    kind: "fetch denied by policy",
    code: `for (;;) { try { await fetch("http://denied.test/"); } catch {} }`,
    net: ["allowed.test"],
  },
];

/** A thread's CPU time in ms so far (Linux); 0 once it has gone. */
function cpuOf(schedstat: string): number {
  try {
    return Number(readFileSync(schedstat, "utf8").split(" ")[0]) / 1e6;
  } catch {
    return 0;
  }
}

/**
 * The CPU time of the host's thread (ms): this thread on the in-process hosts; on the process host,
 * the main threads of this process's children (its worker processes, where isolates and QuickJS
 * threads live on other threads).
 */
function hostThreadCpuMs(host: string): number {
  if (host !== "process") return cpuOf("/proc/thread-self/schedstat");
  let sum = 0;
  for (const child of childPids()) sum += cpuOf(`/proc/${child}/task/${child}/schedstat`);
  return sum;
}

/** The pids of this process's children (the process host's workers among them). */
function childPids(): string[] {
  const pids: string[] = [];
  for (const task of readdirSync(`/proc/${process.pid}/task`)) {
    try {
      pids.push(...readFileSync(`/proc/${process.pid}/task/${task}/children`, "utf8").split(" ").filter(Boolean));
    } catch {}
  }
  return pids;
}

/**
 * All the CPU the machine spent for the guest (ms): on the in-process hosts this whole process
 * (the test's own loop idles meanwhile); on the process host its worker processes, every thread.
 * Undefined where the guest's CPU is spent elsewhere (the remote executor, a Deno process).
 */
function machineCpuMs(combo: { engine: string; host: string }): number | undefined {
  if (combo.host === "remote" || combo.engine === "deno") return undefined;
  if (combo.host !== "process") {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1000;
  }
  let sum = 0;
  for (const child of childPids()) {
    try {
      // utime and stime, fields 14 and 15, in clock ticks of 10 ms (after the command's parentheses).
      const fields = readFileSync(`/proc/${child}/stat`, "utf8").split(") ")[1].split(" ");
      sum += (Number(fields[11]) + Number(fields[12])) * 10;
    } catch {}
  }
  return sum;
}

describe.each(COMBINATIONS)("host time a guest causes on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
    await sandbox.run({ code: "export default 1" }); // a process worker's start-up is not the guest's time
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it.each(LOOPS)("$kind: ends on its CPU limit well before its wall limit", async ({ code, net, slow }) => {
    const cpu = hostThreadCpuMs(combo.host);
    const machineBefore = machineCpuMs(combo);
    const result = await sandbox.run({
      code: `export default async () => { ${code} }`,
      capabilities: net ? { net } : undefined,
      limits: { cpuTimeMs: CPU_MS, wallTimeMs: slow ? SLOW_WALL_MS : WALL_MS },
    });
    const hostMs = Math.round(hostThreadCpuMs(combo.host) - cpu);
    const machineAfter = machineCpuMs(combo);
    const machineMs =
      machineBefore === undefined || machineAfter === undefined ? undefined : Math.round(machineAfter - machineBefore);
    const context = JSON.stringify({ ...result.stats, hostMs, machineMs, logs: result.logs.length });
    // A denied fetch is a host call: the bridge-call limit (1000) may end it first.
    const ends = net ? ["ERR_CPU_TIMEOUT", "ERR_BRIDGE_CALL_LIMIT"] : ["ERR_CPU_TIMEOUT"];
    expect(ends, context).toContain(outcome(result));
    if (net) return; // on the remote host a host call takes ~10 ms: no time of the guest's
    // Measured on v8 in process at load 8 on 2 cores, with a 300 ms limit: 0.3-0.7 s, the
    // setTimeout(0) chain ~2 s (~150 µs charged per ms of wall time: its timers wait 1 ms each);
    // before the fix, 2.4-5.7 s, and the chain reached the wall limit.
    expect(result.stats.wallMs, context).toBeLessThan(slow ? 9000 : 3000);
    // Where the host's thread can be measured, it did not work for the guest much longer than the
    // guest was charged: before, up to 1.7 s within a 300 ms limit; after, ~1.1x at most. (The
    // remote host's thread is the executor's; Deno's guest runs in the Deno process, not on it.)
    // (3x: at CI load ~4 set/clear churn on v8 read 415 ms against 201 charged, the host thread's
    // other work in the same 0.7 s included; uncharged it was 8x and more.)
    if (combo.host !== "remote") expect(hostMs, context).toBeLessThan(3 * CPU_MS);
    // Nor did the machine as a whole: the isolate's thread waking and waiting at each of v8's
    // synchronous crossings is unseen by its CPU clock too. Charged 10 µs a crossing, loops of
    // timer churn, URLs or random bytes took 3.4-4.8x their charge out of the process (60-110 µs
    // of CPU per crossing here, depending on the machine's state); charged 50 µs, 1.2-2.1x.
    if (machineMs !== undefined) expect(machineMs, context).toBeLessThan(3 * result.stats.cpuMs);
  });
});

/**
 * After a limit ends a run, nothing of the guest's may keep working. Measured over the half second
 * after the run, in this process (in-process hosts) or in its worker processes (process host):
 * where the guest's CPU is spent elsewhere (remote executor, Deno's process) this process cannot see it.
 */
const AFTER_MS = 500;
const LINGERING = LOOPS.filter(({ kind }) =>
  ["console.log, small", "1000 intervals of 0 ms", "1000 setTimeout(0) chains", "port setters on a 1 MiB href"].includes(kind),
);

describe.each(COMBINATIONS.filter((c) => machineCpuMs(c) !== undefined))("what a stopped guest leaves on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
    await sandbox.run({ code: "export default 1" });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  // why: on QuickJS a stopped guest ran on for seconds, a core each, counted for no one: the
  // interrupt is asked only every ~10,000 operations, and a loop of slow host calls (port setters
  // on a 1 MiB URL) took seconds to reach it; a stopped guest's queued timer firings all ran before
  // its dispose. Its thread, stalled meanwhile, was replaced by a new one (~150 ms of CPU each).
  // The half second after such runs took 400-960 ms of CPU on two cores; now 9-44 ms.
  it.each(LINGERING)("$kind: nothing runs on once its CPU limit ended it", async ({ code }) => {
    const result = await sandbox.run({
      code: `export default async () => { ${code} }`,
      limits: { cpuTimeMs: CPU_MS, wallTimeMs: WALL_MS },
    });
    expect(outcome(result)).toBe("ERR_CPU_TIMEOUT");
    const before = machineCpuMs(combo) as number;
    await new Promise((resolve) => setTimeout(resolve, AFTER_MS));
    const spent = Math.round((machineCpuMs(combo) as number) - before);
    // Replacing the tainted instance (a spare made again) is the host's, and small.
    expect(spent, JSON.stringify({ ...result.stats, spent })).toBeLessThan(AFTER_MS / 2);
  });
});
