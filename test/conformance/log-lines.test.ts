import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { completed, failed } from "./results.js";

/**
 * Log lines as the guest wrote them, whichever way they reach the host: on v8 most go through
 * shared memory (engines/v8/outbox.ts) and the rest cross (too long, or the outbox full), and a
 * guest stopped by a limit or an abort still reports what it logged first. The same text on
 * every engine and host.
 */
describe.each(COMBINATIONS)("log lines on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it("keeps every line in order across short lines, long ones and a ring filled many times over", async () => {
    // 600 lines, ~90 KB: the 16 KB ring fills five times; every 50th line is 3,000 characters
    // (past the ring's 2,048, so it crosses), every 7th is a warning.
    const code = `export default () => {
      const levels = ["log", "info", "warn", "error", "debug"];
      for (let i = 0; i < 600; i++) {
        const text = i % 50 === 0 ? "long " + i + " " + "x".repeat(3000) : "line " + i + " " + "é😀".repeat(i % 40);
        console[i % 7 === 0 ? "warn" : levels[i % 5]](text);
      }
    }`;
    const result = completed(await sandbox.run({ code, limits: { maxLogEntries: 1000, maxLogBytes: 1_000_000 } }));
    const levels = ["log", "info", "warn", "error", "debug"];
    const expected = Array.from({ length: 600 }, (_, i) => ({
      level: i % 7 === 0 ? "warn" : levels[i % 5],
      message: i % 50 === 0 ? `long ${i} ${"x".repeat(3000)}` : `line ${i} ${"é😀".repeat(i % 40)}`,
    }));
    expect(result.logs.map(({ level, message }) => ({ level, message }))).toEqual(expected);
    expect(result.stats.logsTruncated).toBeUndefined();
  });

  it("times each line when it was logged, not when the host read it", async () => {
    const code = `export default async () => {
      console.log("before");
      await new Promise((resolve) => setTimeout(resolve, 80));
      console.log("after");
      for (let i = 0; i < 50; i++) console.log("burst " + i);
    }`;
    const result = completed(await sandbox.run({ code }));
    const times = result.logs.map((l) => l.atMs);
    expect(result.logs).toHaveLength(52);
    expect(times[1] - times[0]).toBeGreaterThanOrEqual(60);
    expect(times[0]).toBeLessThan(times[1]);
    for (let i = 1; i < times.length; i++) expect(times[i]).toBeGreaterThanOrEqual(times[i - 1]);
    expect(times.at(-1)).toBeLessThanOrEqual(result.stats.wallMs);
  });

  it("reports what a guest logged before a limit stopped it", async () => {
    const code = `export default () => {
      console.log("start");
      for (let i = 0; i < 120; i++) console.info("step " + i);
      for (;;) {}
    }`;
    const cpu = failed(await sandbox.run({ code, limits: { cpuTimeMs: 150, wallTimeMs: 5000 } }));
    expect(cpu.error.code).toBe("ERR_CPU_TIMEOUT");
    expect(cpu.logs.map((l) => l.message)).toEqual(["start", ...Array.from({ length: 120 }, (_, i) => `step ${i}`)]);

    const wall = failed(await sandbox.run({ code, limits: { cpuTimeMs: 5000, wallTimeMs: 150 } }));
    expect(wall.error.code).toBe("ERR_WALL_TIMEOUT");
    expect(wall.logs).toHaveLength(121);
  });

  it("reports what a guest logged before an abort, and the instance after it starts clean", async () => {
    const controller = new AbortController();
    // Aborted once the guest says it spins (after its log): a fixed 100 ms came before a Deno
    // guest had started, on a slow machine, and it had logged nothing.
    const result = await sandbox.run({
      code: `export default () => { console.log("about to spin"); spinning(); for (;;) {} }`,
      globals: { spinning: () => void setTimeout(() => controller.abort(new Error("enough")), 50) },
      limits: { wallTimeMs: 10_000 },
      signal: controller.signal,
    });
    expect(result.status).toBe("aborted");
    expect(result.status === "aborted" ? result.reason : undefined).toBe("enough");
    // On the remote host too: the executor is asked to abort the run and answers it (before, the
    // client closed the request and answered at once, with no logs).
    expect(result.logs.map((l) => l.message)).toEqual(["about to spin"]);
    const next = completed(await sandbox.run({ code: `export default () => { console.log("next"); }` }));
    expect(next.logs.map((l) => l.message)).toEqual(["next"]);
  });

  it("gives each of many concurrent warm calls exactly its own lines", async () => {
    const prefix = await sandbox.prepare({
      code: `export async function handle(id) {
        console.log("enter " + id);
        if (id % 3 === 0) await null;
        for (let i = 0; i < id % 4; i++) console.debug("work " + id + "." + i);
        return id;
      }`,
    });
    try {
      for (let round = 0; round < 3; round++) {
        const ids = Array.from({ length: 64 }, (_, i) => round * 64 + i);
        const results = await Promise.all(ids.map((id) => prefix.call({ export: "handle", args: [id] })));
        results.forEach((result, i) => {
          const id = ids[i];
          expect(completed(result).value).toBe(id);
          expect(result.logs.map((l) => l.message)).toEqual([
            `enter ${id}`,
            ...Array.from({ length: id % 4 }, (_, k) => `work ${id}.${k}`),
          ]);
        });
      }
    } finally {
      await prefix.dispose();
    }
  });

  it("logs what the guest wrote after it replaced the builtins a log line passes through", async () => {
    const code = `export default () => {
      String.prototype.charCodeAt = () => 65;
      String.fromCharCode = () => "Z";
      Date.now = () => -1e15;
      Math.floor = () => 0;
      Object.defineProperty(Object.getPrototypeOf(Uint16Array.prototype), "length", { get: () => 1e9 });
      Object.defineProperty(Array.prototype, "0", { set() {}, get: () => "hijacked", configurable: true });
      if (typeof Atomics === "object") { Atomics.store = () => 0; Atomics.load = () => 0; }
      globalThis.SharedArrayBuffer = function () { throw new Error("no"); };
      for (let i = 0; i < 300; i++) console.log("héllo " + i + " 😀");
    }`;
    const result = completed(await sandbox.run({ code }));
    expect(result.logs.map((l) => l.message)).toEqual(Array.from({ length: 300 }, (_, i) => `héllo ${i} 😀`));
    for (const line of result.logs) {
      expect(line.level).toBe("log");
      expect(line.atMs).toBeGreaterThanOrEqual(0);
      expect(line.atMs).toBeLessThanOrEqual(result.stats.wallMs);
    }
  });

  it("keeps the log limits for lines that never cross", async () => {
    const code = `export default () => { for (let i = 0; i < 5000; i++) console.log("n" + i); }`;
    const entries = completed(await sandbox.run({ code, limits: { maxLogEntries: 300 } }));
    expect(entries.logs).toHaveLength(301);
    expect(entries.logs[299].message).toBe("n299");
    expect(entries.logs[300].message).toContain("more than 300 entries");
    expect(entries.stats.logsTruncated).toBe(true);
  });
});
