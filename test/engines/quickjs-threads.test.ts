import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QuickJSInstance } from "../../src/engines/quickjs/instance.js";
import { CONTROL_BYTES } from "../../src/engines/quickjs/protocol.js";
import { type QuickJSThread, QuickJSThreads } from "../../src/engines/quickjs/threads.js";
import { warmUpModulesJson } from "../../src/engines/warm-up-modules.js";
import { type Sandbox, createSandbox } from "../../src/index.js";

/**
 * QuickJS instances share worker threads. A guest stuck in a builtin the interrupt cannot reach
 * (a join over 2^32-1 holes) holds its thread until the thread is ended (STUCK_MS, 3 s after the
 * stop): what it costs other tenants must stay there.
 */
const STUCK = "export default () => { const a = []; a.length = 2 ** 32 - 1; return a.join('').length }";
const STUCK_MS = 3000;

/** Run `code`, a module's script form (a function returning its exports), on instance `id` of `thread`. */
function evaluateScript(thread: QuickJSThread, id: number, code: string): void {
  thread.post({
    t: "evaluate",
    id,
    bindingsText: null,
    mode: "run",
    inputText: '{"$":"u"}',
    caps: [1 << 24, 1000, 1 << 20, 1 << 24],
    script: { code, filename: "<guest>" },
  });
}

describe.each(["inprocess", "process"] as const)("quickjs/%s: a thread held by a stuck guest", (host) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ engine: "quickjs", host });
    await sandbox.run({ code: "export default 1" });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  async function timed<T>(work: () => Promise<T>): Promise<[T, number]> {
    const started = performance.now();
    const value = await work();
    return [value, performance.now() - started];
  }

  // why: the spares and warm instances made on the thread were lost with it but still handed
  // out: a one-off run on a lost spare waited its whole wall time (ERR_WALL_TIMEOUT after 5 s),
  // a prefix's call on a lost warm instance failed at once with ERR_INSTANCE_RESET.
  it("spares and warm instances lost with the thread are replaced, not handed out", async () => {
    const prefixes = await Promise.all(
      [1, 2, 3, 4].map((n) => sandbox.prepare({ code: `export const f = () => ${n}; export default (x) => x + ${n}` })),
    );
    const stuck = await sandbox.run({ code: STUCK, limits: { cpuTimeMs: 100 } });
    expect(stuck.ok ? "completed" : stuck.error.code).toBe("ERR_CPU_TIMEOUT");
    await new Promise((resolve) => setTimeout(resolve, STUCK_MS + 500));
    // 2.5 s, as below: a loaded CI run is slow; the bug showed as a 5 s wall timeout or a failure.
    for (let k = 0; k < 6; k++) {
      const [result, ms] = await timed(() => sandbox.run({ code: "export default 5" }));
      expect(result.ok ? result.value : result.error.code).toBe(5);
      expect(ms).toBeLessThan(2500);
    }
    for (const [i, prefix] of prefixes.entries()) {
      const [called, callMs] = await timed(() => prefix.call({ export: "f" }));
      expect(called.ok ? called.value : called.error.code).toBe(i + 1);
      expect(callMs).toBeLessThan(2500);
      const [ran, runMs] = await timed(() => prefix.run({ code: "export default 10", input: 0 }));
      expect(ran.ok ? ran.value : ran.error.code).toBe(10);
      expect(runMs).toBeLessThan(2500);
      await prefix.dispose();
    }
  }, 20_000);

  // why: while the stopped guest held its thread, new instances still went to it (the least
  // loaded thread, once the stuck instance was detached) and the spares made on it were handed
  // out: those runs waited for the stuck guest and failed with the thread after 3 s.
  it("runs made while the thread is held go to other threads", async () => {
    const prefix = await sandbox.prepare({ code: "export const f = () => 7" });
    const stuck = await sandbox.run({ code: STUCK, limits: { cpuTimeMs: 100 } });
    expect(stuck.ok ? "completed" : stuck.error.code).toBe("ERR_CPU_TIMEOUT");
    // 2.5 s: a loaded CI run took 1.5–2.3 s beside the stuck guest's spinning thread; before the
    // fix these runs waited for it and failed with the thread after 3 s (the values catch that too).
    for (let k = 0; k < 6; k++) {
      const [result, ms] = await timed(() => sandbox.run({ code: "export default 5" }));
      expect(result.ok ? result.value : result.error.code).toBe(5);
      expect(ms).toBeLessThan(2500);
      const [called, callMs] = await timed(() => prefix.call({ export: "f" }));
      expect(called.ok ? called.value : called.error.code).toBe(7);
      expect(callMs).toBeLessThan(2500);
    }
    await prefix.dispose();
    // Past the thread's end, everything still runs.
    await new Promise((resolve) => setTimeout(resolve, STUCK_MS + 500));
    const after = await sandbox.run({ code: "export default 6" });
    expect(after.ok ? after.value : after.error.code).toBe(6);
  }, 20_000);
});

/**
 * A thread stalled by a stopped guest gets a replacement beside it (QuickJSThreads.pick). When
 * the stalled thread answers again before it is ended, one thread is too many: it is retired.
 */
describe("quickjs: a stalled thread that answers again", () => {
  // Busy in a builtin for a few hundred ms (well under STUCK_MS, when the thread would be ended).
  const STALL = `(h) => { const a = []; a.length = ${5e6}; a.join(""); return {}; }`;

  // why: the replacement made while a thread was stalled was never retired: a thread held for a
  // second by each of N stopped guests left the engine with N threads more than its size.
  it("leaves the thread count at its size", async () => {
    const threads = new QuickJSThreads(0, 1);
    // A grace the stall outlasts on any machine: the pick below must start a replacement.
    threads.stallGraceMs = 20;
    try {
      const thread = await threads.pick();
      thread.attach(1, { onMessage: () => {}, onLost: () => {} });
      const control = new SharedArrayBuffer(CONTROL_BYTES);
      await thread.request({ t: "create", id: 1, memoryMb: 64, control, warmUp: false });
      const started = performance.now();
      evaluateScript(thread, 1, STALL);
      // Once the guest runs (a crossing published its entry: a stop flag set before the worker
      // reads the evaluate would drop it unrun), stopped as an instance whose guest was stopped is
      // disposed (QuickJSInstance.dispose): the ping waits behind the guest, so the thread is
      // stalled until the guest comes back.
      const entered = new Float64Array(control, 8, 2);
      while (entered[1] === 0 && performance.now() - started < 10_000) await new Promise((r) => setTimeout(r, 1));
      Atomics.store(new Int32Array(control, 0, 1), 0, 1);
      thread.post({ t: "dispose", id: 1 });
      thread.detach(1);
      thread.expectResponsive();
      expect(thread.stalled).toBe(true);
      // Not answering within the grace a pick gives it (stallGraceMs), it gets a replacement.
      const replacement = await threads.pick();
      expect(replacement).not.toBe(thread);
      expect(threads.count).toBe(2);
      const deadline = performance.now() + 10_000;
      while (threads.count > 1 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(threads.count).toBe(1);
      // Retired when the stalled thread answered, not ended by the stuck-thread timer.
      expect(performance.now() - started).toBeLessThan(STUCK_MS);
      const next = await threads.pick();
      expect(next.alive).toBe(true);
      expect(threads.count).toBe(1);
    } finally {
      await threads.dispose();
    }
  }, 20_000);
});

describe("quickjs: one template per engine", () => {
  /** Create instance `id` on `thread` and run a module whose default export returns `expression`: its value. */
  async function runOn(thread: QuickJSThread, id: number, expression: string): Promise<unknown> {
    let outcome: (text: string) => void = () => {};
    const done = new Promise<string>((resolve) => {
      outcome = resolve;
    });
    thread.attach(id, {
      onMessage: (message) => {
        if (message.t === "done") outcome(message.text);
      },
      onLost: (reason) => outcome(`lost: ${reason}`),
    });
    await thread.request({ t: "create", id, memoryMb: 64, control: new SharedArrayBuffer(CONTROL_BYTES), warmUp: false });
    // The script form of `export default () => <expression>`.
    evaluateScript(thread, id, `(h) => ({ default: () => ${expression} })`);
    const text = await done;
    thread.post({ t: "dispose", id });
    thread.detach(id);
    return (JSON.parse(text) as { v: unknown }).v;
  }

  // why: a thread was started only once esbuild had made the warm-up modules (its own start
  // ~160 ms), so a process's first QuickJS run waited for esbuild, then the thread, then the
  // template, one after another (~470 ms from createSandbox to the first run's end; ~390 now).
  it("a thread starts before the warm-up modules exist; its template waits for them, then serves", async () => {
    const threads = new QuickJSThreads(0, 1);
    let give: (modules: string) => void = () => {};
    // What pick would begin (esbuild's transform of the warm-up modules), held until given here.
    (threads as unknown as { warmUp: Promise<string> }).warmUp = new Promise((resolve) => {
      give = resolve;
    });
    try {
      const thread = await threads.pick();
      expect(thread.makingTemplate).toBe(true);
      let ran = false;
      const run = runOn(thread, 1, "6 * 7").then((value) => {
        ran = true;
        return value;
      });
      // Its template boots up to the warm-up, then waits (a loaded machine boots one in ~1 s).
      await new Promise((resolve) => setTimeout(resolve, 1500));
      expect(ran).toBe(false);
      give(await warmUpModulesJson());
      expect(await run).toBe(42);
      expect(threads.templatesMade).toBe(1);
    } finally {
      await threads.dispose();
    }
  }, 20_000);

  // why: each thread booted its own template (~0.5 s of a core here, mostly page faults reading
  // 16 MB memories), and the two an engine starts with did so at once, each slowing the other.
  it("instances wait for the first thread's template, and threads started later copy from it", async () => {
    const threads = new QuickJSThreads(0, 2);
    try {
      const first = await threads.pick();
      const firstRun = runOn(first, 1, "Math.random()");
      expect(first.makingTemplate).toBe(true);
      // Not a second thread making a second template meanwhile: the next instance waits for the
      // template, then goes to a thread started with it (not onto the first thread: an engine's
      // first two spares, and a prefix's two warm instances taken from them, would share a core).
      const secondPick = threads.pick().then((thread) => ({ thread, afterTemplate: !first.makingTemplate }));
      const drawn = [Number(await firstRun)];
      expect(first.makingTemplate).toBe(false);
      const { thread: second, afterTemplate } = await secondPick;
      expect(afterTemplate).toBe(true);
      expect(second).not.toBe(first);
      expect(second.startedWithTemplate).toBe(true);
      expect(threads.count).toBe(2);
      // Copies on both threads run guest code and draw numbers of their own.
      for (let id = 2; id < 6; id++) drawn.push(Number(await runOn(id % 2 ? first : second, id, "Math.random()")));
      expect(drawn.every((n) => n >= 0 && n < 1)).toBe(true);
      expect(new Set(drawn).size).toBe(drawn.length);
      expect(await runOn(second, 6, "[1, 2, 3].map((n) => n * 2).join()")).toBe("2,4,6");
      // The second thread made none of its own.
      expect(threads.templatesMade).toBe(1);
    } finally {
      await threads.dispose();
    }
  }, 20_000);
});

describe("quickjs: a prefix's warm instances", () => {
  // why: a prefix's two instances both took spares on one thread, and every call ran on one core
  // while the other thread idled (events, 64 in flight: 21-25k/s, that thread at 100%).
  it("go to different threads when spares are ready on both, so their calls use both cores", async () => {
    const served = new Map<QuickJSInstance, number>();
    const call = QuickJSInstance.prototype.call;
    QuickJSInstance.prototype.call = function (this: QuickJSInstance, ...args: Parameters<typeof call>) {
      served.set(this, (served.get(this) ?? 0) + 1);
      return call.apply(this, args);
    };
    const sandbox = await createSandbox({ engine: "quickjs", host: "inprocess", spareInstances: 3 });
    const spares = async (count: number) => {
      const deadline = performance.now() + 10_000;
      while ((sandbox.stats().spareInstances ?? 0) < count && performance.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
      expect(sandbox.stats().spareInstances).toBe(count);
    };
    try {
      // Spares on both threads (the first thread makes the template; the next instance waits for
      // it, then goes to a second thread), the prefix takes one, and its refill is made: the newest
      // spare is then on the prefix's own thread, and its second instance must not take that one.
      await spares(3);
      const prefix = await sandbox.prepare({
        code: "export function f(n) { let s = 0; for (let i = 0; i < 20000; i++) s += i; return s + n }",
      });
      await spares(3);
      const results = await Promise.all(Array.from({ length: 400 }, (_, i) => prefix.call({ export: "f", args: [i] })));
      expect(results.every((r) => r.ok)).toBe(true);
      expect(served.size).toBe(2);
      expect(new Set([...served.keys()].map((instance) => instance.site)).size).toBe(2);
    } finally {
      QuickJSInstance.prototype.call = call;
      await sandbox.dispose();
    }
  }, 30_000);
});

describe("quickjs: a stopped guest's thread, busy with another's run", () => {
  // why (CI): a guest stopped on a thread got it pinged, and a thread silent for STUCK_MS was
  // ended: but another guest's long crossing on it (a million objects encoded, seconds in
  // QuickJS) held the ping, and that run failed ERR_INSTANCE_RESET "stopped answering after a
  // guest was stopped". One runs at a time: while another is in a crossing it was not told to
  // stop, the thread is not stuck in the stopped one.
  it("is not ended while another guest's crossing holds its answer", async () => {
    const threads = new QuickJSThreads(0, 1);
    try {
      const thread = await threads.pick();
      const shared = new SharedArrayBuffer(CONTROL_BYTES);
      const control = new Int32Array(shared, 0, 2);
      const cpu = new Float64Array(shared, 8, 2);
      let outcome: (text: string) => void = () => {};
      const done = new Promise<string>((resolve) => {
        outcome = resolve;
      });
      thread.attach(1, {
        onMessage: (message) => {
          if (message.t === "done") outcome(message.text);
        },
        onLost: (reason) => outcome(`lost: ${reason}`),
        working: () => Atomics.load(control, 0) === 0 && cpu[1] !== 0,
      });
      await thread.request({ t: "create", id: 1, memoryMb: 64, control: shared, warmUp: false });
      // A crossing of 4.5 s by the clock, past STUCK_MS (3 s).
      evaluateScript(
        thread,
        1,
        "(h) => ({ default: () => { const t = Date.now(); while (Date.now() - t < 4500) {} return 7 } })",
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      // As a tainted instance's dispose does: the thread is to answer a ping within STUCK_MS.
      thread.expectResponsive();
      const text = await done;
      expect(text.startsWith("lost")).toBe(false);
      expect((JSON.parse(text) as { v: unknown }).v).toBe(7);
      expect(thread.alive).toBe(true);
      await thread.whenAnswered();
      expect(thread.stalled).toBe(false);
    } finally {
      await threads.dispose();
    }
  }, 20_000);
});

describe("quickjs: runs stopped by their limits", () => {
  // why: a stopped guest held its thread on (a loop of slow host calls until the interrupt was
  // next asked, seconds; queued timer firings, ~120 ms), and any instance made meanwhile started
  // a new thread beside it (~150 ms of CPU), retired again once the stalled one answered.
  it("start no threads beside the ones they were stopped on", async () => {
    const picked = new Set<QuickJSThread>();
    const pick = QuickJSThreads.prototype.pick;
    QuickJSThreads.prototype.pick = async function (this: QuickJSThreads, ...args: Parameters<typeof pick>) {
      // A grace no stall outlasts unless its guest runs on (the port loop, before: seconds): with
      // every core busy, a stopped guest's thread answered after up to 139 ms, past the default,
      // and once, in a full local run of the suite, after more than 1.5 s. Below STUCK_MS (3 s),
      // past which the thread would be ended and replaced anyway.
      this.stallGraceMs = 2500;
      const thread = await pick.apply(this, args);
      picked.add(thread);
      return thread;
    };
    const sandbox = await createSandbox({ engine: "quickjs", host: "inprocess" });
    const spares = async () => {
      const deadline = performance.now() + 10_000;
      while ((sandbox.stats().spareInstances ?? 0) < 2 && performance.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
    };
    try {
      await sandbox.run({ code: "export default 1" });
      await spares();
      expect(picked.size).toBe(2);
      const loops = [
        `for (;;) console.log("x");`,
        `for (let i = 0; i < 1000; i++) setInterval(() => {}, 0); await new Promise(() => {});`,
        `const w = new URL("http://a.test/"); w.pathname = "\\u4e00".repeat(116000); for (let i = 0; ; i++) w.port = String(i % 60000);`,
      ];
      for (let round = 0; round < 2; round++) {
        for (const code of loops) {
          const result = await sandbox.run({ code: `export default async () => { ${code} }`, limits: { cpuTimeMs: 100 } });
          expect(result.ok ? "completed" : result.error.code).toBe("ERR_CPU_TIMEOUT");
        }
      }
      await spares();
      expect(picked.size).toBe(2);
      expect((await sandbox.run({ code: "export default 2" })).ok).toBe(true);
    } finally {
      QuickJSThreads.prototype.pick = pick;
      await sandbox.dispose();
    }
  }, 30_000);
});
