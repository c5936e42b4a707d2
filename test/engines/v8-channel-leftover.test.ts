import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allowPollingPauses } from "../../src/core/busy-poll.js";
import { createSandbox } from "../../src/index.js";
import { value } from "../helpers/results.js";

/**
 * A warm call served through shared memory (engines/v8/channel.ts) answers before what it left
 * queued has run: a synchronous export's unawaited chain runs when the serving task ends, after
 * the call. Found by a red-team pass: such a leftover spun on with nothing bounding it (a core
 * burnt while the instance sat idle), and the next call handed that instance was charged for it
 * (ERR_CPU_TIMEOUT). Now it is bounded by the call's wall time, and no call is handed the instance
 * while it runs.
 */
const PREFIX = `
  globalThis.marker = Math.random();
  export function ok() { return marker }
  export function leave() { Promise.resolve().then(() => { for (;;) {} }); return "returned" }
`;

describe("what a served call leaves queued", () => {
  // Busy-polling pauses when this process loses windows (a loaded machine): the test needs the channel.
  beforeAll(() => allowPollingPauses(false));
  afterAll(() => allowPollingPauses(true));

  it("runs within the call's wall time, and the instance is handed to no other call meanwhile", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    const prefix = await sandbox.prepare({ code: PREFIX, limits: { memoryMb: 32 } });
    const leaveLimits = { cpuTimeMs: 1500, wallTimeMs: 1500 };
    // Served only in a stream (right after other calls); otherwise its crossing runs the chain
    // before returning, and its own limit stops it (ERR_CPU_TIMEOUT): then the stream is tried again.
    let before: unknown;
    let left = false;
    for (let attempt = 0; attempt < 40 && !left; attempt++) {
      for (let i = 0; i < 20; i++) before = value(await prefix.call({ export: "ok", args: [] }));
      const result = await prefix.call({ export: "leave", args: [], limits: leaveLimits });
      left = result.ok;
    }
    expect(left).toBe(true);
    const returnedAt = performance.now();

    // While the leftover spins, a call goes to another instance (a new marker), and succeeds.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const during = await prefix.call({ export: "ok", args: [], limits: { cpuTimeMs: 300, wallTimeMs: 1000 } });
    expect(value(during)).not.toBe(before);

    // Past the call's wall time the leftover's instance is disposed: this process idles.
    const wait = returnedAt + leaveLimits.wallTimeMs + 300 - performance.now();
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, wait)));
    const cpu = process.cpuUsage();
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const { user, system } = process.cpuUsage(cpu);
    // Unbounded, the spin took a core: ~1,000 ms of CPU in this second.
    expect((user + system) / 1000).toBeLessThan(400);
    // And the disposed instance is no longer counted idle (it was, until a call passed over it).
    const stats = sandbox.stats();
    expect(stats.idleInstances).toBe(1);
    expect(stats.prefixes?.[0]?.idle).toBe(1);
  });
});
