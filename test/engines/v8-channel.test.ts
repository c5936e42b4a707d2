import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { allowPollingPauses } from "../../src/core/busy-poll.js";
import { CallChannel } from "../../src/engines/v8/channel.js";
import { SLOW_PATH_MS } from "../../src/engines/v8/instance.js";
import { createSandbox } from "../../src/index.js";
import { code, value } from "../helpers/results.js";

/** Calls in a stream go through shared memory: count the ones that did. */
function countServed(): () => number {
  const call = vi.spyOn(CallChannel.prototype, "call");
  return () => call.mock.results.filter((r) => r.value !== undefined).length;
}

const PREFIX = `
  globalThis.marker = Math.random();
  export function mark() { return marker }
  export function echo(x) { return x }
  export function add(a, b) { return a + b }
  export function loud(n) { console.log("call", n); return n }
  export function boom(n) { throw new RangeError("boom " + n) }
  export async function viaHost(n) { return (await twice(n)) + 1 }
  export async function busyThenHost(n) { const end = Date.now() + 3; while (Date.now() < end) {} return (await twice(n)) + 1 }
  export function spin() { for (;;) {} }
  export function grow() { const a = []; for (;;) a.push(new Array(1000).fill(1)) }
  export function big(n) { return "y".repeat(n) }
  export function wait(ms) { const end = Date.now() + ms; while (Date.now() < end) {} return ms }
`;

describe("v8 warm calls through shared memory", () => {
  // Busy-polling pauses when this process loses windows (a loaded machine): these tests need the channel.
  beforeAll(() => allowPollingPauses(false));
  afterAll(() => allowPollingPauses(true));

  afterEach(() => {
    vi.restoreAllMocks();
  });

  async function prepared() {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    const prefix = await sandbox.prepare({
      code: PREFIX,
      globals: { twice: async (n: number) => n * 2 },
      limits: { memoryMb: 32 },
    });
    return { sandbox, prefix, [Symbol.asyncDispose]: () => sandbox.dispose() };
  }

  it("a stream of calls is served, with every value intact (non-BMP text and lone surrogates too)", async () => {
    await using setup = await prepared();
    const served = countServed();
    const samples = ["plain", "ümlaut", "emoji 😀 and 𝄞", "\ud800 lone", "", "tab\tnew\nline", "x".repeat(5000)];
    // Until 300 went through shared memory: at load 1.5, 600 calls served 543; at CI's load ~5 only 128
    // were once (a call now and then outlasts the window while the serving thread waits for a core,
    // and the next one starts a new stream), so a fixed count measured the machine, not the channel.
    for (let i = 0; i < 3000 && (i < 300 || served() <= 300); i++) {
      const text = samples[i % samples.length];
      expect(value(await setup.prefix.call({ export: "echo", args: [{ i, text, nested: [text, i] }] }))).toEqual({
        i,
        text,
        nested: [text, i],
      });
      expect(value(await setup.prefix.call({ export: "add", args: [i, 1] }))).toBe(i + 1);
    }
    // Served through shared memory (the first of a stream crosses the usual way).
    expect(served()).toBeGreaterThan(300);
  });

  it("arguments and answers larger than the shared memory take the usual way, intact", async () => {
    await using setup = await prepared();
    const served = countServed();
    // Small calls until `more` of them went through shared memory (so the large one meets an
    // open channel): a fixed count flaked under the full suite's load, where a call now and then
    // outlasts the 1 ms window and the next one starts a new stream (6 of 66 served once).
    const serveSome = async (more: number) => {
      const target = served() + more;
      for (let i = 0; i < 2000 && served() < target; i++)
        expect(value(await setup.prefix.call({ export: "add", args: [i, 1] }))).toBe(i + 1);
      expect(served()).toBeGreaterThanOrEqual(target);
    };
    await serveSome(5);
    const large = "z".repeat(100_000);
    expect(value(await setup.prefix.call({ export: "echo", args: [large] }))).toBe(large);
    // An answer too big for the memory comes back as the serving task's result.
    await serveSome(3);
    expect(value(await setup.prefix.call({ export: "big", args: [200_000] }))).toBe("y".repeat(200_000));
    expect(value(await setup.prefix.call({ export: "add", args: [1, 1] }))).toBe(2);
    // And calls are served again afterwards.
    await serveSome(3);
  });

  it("thrown errors, logs and calls that await the host keep their meaning", async () => {
    await using setup = await prepared();
    for (let i = 0; i < 50; i++) {
      const thrown = await setup.prefix.call({ export: "boom", args: [i] });
      expect(code(thrown)).toBe("ERR_USER_CODE");
      expect(thrown.ok ? "" : thrown.error.message).toContain(`boom ${i}`);
      const logged = await setup.prefix.call({ export: "loud", args: [i] });
      expect(value(logged)).toBe(i);
      expect(logged.logs.map((l) => l.message)).toEqual([`call ${i}`]);
      expect(value(await setup.prefix.call({ export: "viaHost", args: [i] }))).toBe(i * 2 + 1);
    }
  });

  it("a call's answer is never read by the next call (an outcome that arrived through onDone first)", async () => {
    await using setup = await prepared();
    // busyThenHost outlasts the polling window, so its answer is read on a timer; its outcome
    // (a promise's) arrives through onDone, maybe before that read. The next calls must still
    // each get their own answer.
    for (let i = 0; i < 40; i++) {
      expect(value(await setup.prefix.call({ export: "add", args: [i, 1] }))).toBe(i + 1);
      expect(value(await setup.prefix.call({ export: "busyThenHost", args: [i] }))).toBe(i * 2 + 1);
      expect(value(await setup.prefix.call({ export: "add", args: [i, 2] }))).toBe(i + 2);
      expect(value(await setup.prefix.call({ export: "echo", args: [`text ${i}`] }))).toBe(`text ${i}`);
    }
  });

  it("limits changed between calls apply to the next call", async () => {
    await using setup = await prepared();
    for (let i = 0; i < 30; i++) value(await setup.prefix.call({ export: "big", args: [100] }));
    expect(code(await setup.prefix.call({ export: "big", args: [100], limits: { maxOutputBytes: 50 } }))).toBe(
      "ERR_OUTPUT_TOO_LARGE",
    );
    for (let i = 0; i < 30; i++) value(await setup.prefix.call({ export: "big", args: [100] }));
  });

  it("a CPU limit, the memory limit and an abort stop a served call; later calls get a fresh instance", async () => {
    await using setup = await prepared();
    const stream = async () => {
      for (let i = 0; i < 30; i++) value(await setup.prefix.call({ export: "add", args: [i, 1] }));
      return value(await setup.prefix.call({ export: "mark" }));
    };
    let before = await stream();
    expect(code(await setup.prefix.call({ export: "spin", limits: { cpuTimeMs: 100, wallTimeMs: 5000 } }))).toBe(
      "ERR_CPU_TIMEOUT",
    );
    let after = await stream();
    expect(after).not.toBe(before);
    before = after;
    expect(code(await setup.prefix.call({ export: "grow" }))).toBe("ERR_MEMORY_LIMIT");
    after = await stream();
    expect(after).not.toBe(before);
    before = after;
    const controller = new AbortController();
    setTimeout(() => controller.abort("enough"), 50);
    const aborted = await setup.prefix.call({ export: "spin", signal: controller.signal, limits: { wallTimeMs: 10_000 } });
    expect(aborted.status).toBe("aborted");
    expect(await stream()).not.toBe(before);
  });

  it("runs on the same prefix interleave with served calls", async () => {
    await using setup = await prepared();
    for (let i = 0; i < 40; i++) {
      expect(value(await setup.prefix.call({ export: "add", args: [i, 2] }))).toBe(i + 2);
      if (i % 5 === 0) expect(value(await setup.prefix.run({ code: "export default () => typeof marker" }))).toBe("number");
    }
  });

  it("the serving task ends when calls stop: no CPU is burned while idle", async () => {
    await using setup = await prepared();
    for (let i = 0; i < 200; i++) value(await setup.prefix.call({ export: "add", args: [i, 1] }));
    await new Promise((r) => setTimeout(r, 50));
    const before = process.cpuUsage();
    await new Promise((r) => setTimeout(r, 300));
    const used = process.cpuUsage(before);
    // A spinning task would use ~300 ms of CPU here; an idle process uses a few.
    expect((used.user + used.system) / 1000).toBeLessThan(100);
  });

  it("a guest that patches typed-array accessors, species and string methods never reaches the shared memory", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    await using prefix = await sandbox.prepare({
      code: `
        let leaked = "";
        const isShared = (b) => Object.prototype.toString.call(b) === "[object SharedArrayBuffer]";
        const TA = Object.getPrototypeOf(Uint16Array.prototype);
        const bufferOf = Object.getOwnPropertyDescriptor(TA, "buffer").get;
        for (const key of ["length", "buffer", "byteOffset", "byteLength"]) {
          const original = Object.getOwnPropertyDescriptor(TA, key).get;
          Object.defineProperty(TA, key, { configurable: true, get() {
            try { if (isShared(Reflect.apply(bufferOf, this, []))) leaked += key + ";"; } catch {}
            return Reflect.apply(original, this, []);
          } });
        }
        for (const C of [Uint16Array, Int32Array]) {
          Object.defineProperty(C, Symbol.species, { configurable: true, get() { leaked += "species;"; return C; } });
          Object.defineProperty(C.prototype, "constructor", { configurable: true, get() { leaked += "constructor;"; return C; } });
          C.prototype.subarray = function () { leaked += "subarray;"; return this; };
        }
        String.prototype[Symbol.split] = function () { leaked += "split;"; return []; };
        String.prototype.split = function () { leaked += "split;"; return []; };
        Object.defineProperty(Array.prototype, "0", { configurable: true, set(v) { leaked += "index setter;"; } });
        export function add(a, b) { return a + b }
        export function leaks() { return leaked }
        export function text(n) { return "é😀".repeat(n) }`,
    });
    const served = countServed();
    // Until 200 were served (a loaded machine now and then ends a stream: a call outlasts the window).
    for (let i = 0; i < 3000 && (i < 200 || served() <= 200); i++) {
      expect(value(await prefix.call({ export: "add", args: [i, 1] }))).toBe(i + 1);
      expect(value(await prefix.call({ export: "text", args: [i % 7] }))).toBe("é😀".repeat(i % 7));
    }
    expect(served()).toBeGreaterThan(200);
    expect(value(await prefix.call({ export: "leaks" }))).toBe("");
  });

  it("a served call's answer that waits for a busy host loop is not failed by the CPU limit", async () => {
    // why: after answering, the serving task polls for the next call, and that polling is the
    // isolate's CPU time too. A loop busy elsewhere reads the answer late: the watchdog must not
    // take the polling for the guest's work. A 50 ms window makes the polling outlast the limit.
    // (A 5 ms limit failed once in CI at load ~5: the isolate's thread preempted mid-call reads as
    // CPU time, and this process's own CPU, its 30 ms busy loop included, bounds it no lower. 15 ms
    // failed 1 call in 20 in CI on 2026-12-04, at the same load. 30 ms: still under the ~40 ms the
    // serving task polls while this loop is busy, so an answer's polling counted would fail it.)
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", busyPollMs: 50 });
    await using prefix = await sandbox.prepare({ code: PREFIX });
    const served = countServed();
    const codes: string[] = [];
    // At least 20 calls, and on until 3 went through shared memory (the case this tests): how
    // many do depends on the machine's load (CI under the whole suite: 5 of 20 once, 2 another
    // time). 200 calls at most.
    for (let i = 0; i < 200 && (i < 20 || served() < 3); i++) {
      const call = prefix.call({ export: "add", args: [i, 1], limits: { cpuTimeMs: 30 } });
      // After the pool's end-of-tick gather (a later nextTick runs after it): the call is in shared memory.
      await new Promise((resolve) => process.nextTick(resolve));
      const end = performance.now() + 40;
      while (performance.now() < end) {} // this loop is busy for 40 ms
      codes.push(code(await call));
    }
    expect(served()).toBeGreaterThanOrEqual(3);
    expect(codes).toEqual(Array(codes.length).fill("completed"));
  });

  it("an export whose served call was slow crosses the usual way for a while, then is served again", async () => {
    // why: the mark was for good, and a stall of a loaded machine (a collection, a thread waiting
    // for a core) makes a quick call that slow too: its export left the channel for the life of
    // the instance (CI saw a test's export served no more after its 45th call).
    await using setup = await prepared();
    const served = countServed();
    const call = async (name: string, ms: number) => {
      const before = served();
      const args = name === "wait" ? [ms] : [ms, 1];
      expect(value(await setup.prefix.call({ export: name, args }))).toBe(name === "wait" ? ms : ms + 1);
      return served() > before;
    };
    // In a stream, a served call of `wait` that outlasts 50 windows (80 ms of 1 ms windows); then
    // `wait` and `add` alternately: `add` is served, `wait` is not. (A loaded machine may break a
    // stream or serve the long call as the one that opens a task, which is not judged: tried again.)
    let marked = false;
    for (let attempt = 0; attempt < 10 && !marked; attempt++) {
      for (let i = 0; i < 20; i++) await call("add", i);
      await call("wait", 80);
      const waits: boolean[] = [];
      const adds: boolean[] = [];
      for (let i = 0; i < 20; i++) {
        waits.push(await call("wait", 0));
        adds.push(await call("add", i));
      }
      marked = !waits.includes(true) && adds.includes(true);
    }
    expect(marked).toBe(true);
    // After SLOW_PATH_MS it is served again.
    await new Promise((resolve) => setTimeout(resolve, SLOW_PATH_MS + 100));
    let servedAgain = 0;
    for (let i = 0; i < 2000 && servedAgain < 10; i++) {
      if (await call("wait", 0)) servedAgain++;
      await call("add", i);
    }
    expect(servedAgain).toBe(10);
  });

  it("with busyPollMs: 0 nothing is served", async () => {
    const served = countServed();
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", busyPollMs: 0 });
    await using prefix = await sandbox.prepare({ code: PREFIX, globals: { twice: async (n: number) => n * 2 } });
    for (let i = 0; i < 50; i++) expect(value(await prefix.call({ export: "add", args: [i, 1] }))).toBe(i + 1);
    expect(served()).toBe(0);
  });
});
