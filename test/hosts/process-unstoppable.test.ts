import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { LIMIT_CODES } from "../../src/core/errors.js";
import { completed, outcome } from "../conformance/results.js";
import { alive, disposedAfterEach, until, workerPids } from "../helpers/processes.js";

/**
 * A v8 guest inside a builtin that no limit interrupts (`Object.keys` of a 10⁷-element array near
 * a 32 MB heap: disposing its isolate does not stop it) runs on after its run is answered, its
 * thread busy and its worker growing by hundreds of MB. The worker says so before it answers the
 * run, and takes no new work: the next run, sent there before, was killed with the worker by the
 * RSS watchdog as the culprit (ERR_MEMORY_LIMIT for a run that returned a constant).
 */
const kept = disposedAfterEach();

describe("a worker holding a guest no limit can stop", () => {
  it("is retired before the run is answered: the next run goes to another worker, and it ends", async () => {
    const sandbox = kept(await createSandbox({ engine: "v8", host: "process", memoryMb: 32, workers: { min: 1, max: 1 } }));
    completed(await sandbox.run({ code: "export default 1" }));
    const [first] = workerPids(sandbox);
    const stuck = await sandbox.run({
      code: "export default () => Object.keys(Array(1e7).fill(0)).length",
      limits: { wallTimeMs: 2000, cpuTimeMs: 500 },
    });
    expect(LIMIT_CODES.has(outcome(stuck) as never), outcome(stuck)).toBe(true);
    // Long enough for the stuck guest to pass the worker's memory budget, were this run there.
    const next = await sandbox.run({
      code: "export default async () => { await new Promise((r) => setTimeout(r, 1500)); return 'ok' }",
    });
    expect(completed(next).value).toBe("ok");
    expect(workerPids(sandbox)).not.toContain(first);
    await until(() => !alive(first), 10_000);
  }, 30_000);

  it("is not what limits that stop their guest make: the worker serves on", async () => {
    const sandbox = kept(await createSandbox({ engine: "v8", host: "process", workers: { min: 1, max: 1 } }));
    completed(await sandbox.run({ code: "export default 1" }));
    const [pid] = workerPids(sandbox);
    const spin = await sandbox.run({ code: "export default () => { for (;;) {} }", limits: { cpuTimeMs: 100 } });
    expect(outcome(spin)).toBe("ERR_CPU_TIMEOUT");
    const late = await sandbox.run({ code: "export default () => new Promise(() => {})", limits: { wallTimeMs: 100 } });
    expect(outcome(late)).toBe("ERR_WALL_TIMEOUT");
    const big = await sandbox.run({
      code: "export default () => { const a = []; for (;;) a.push(new Array(1e5).fill(1)) }",
      limits: { memoryMb: 16 },
    });
    expect(outcome(big)).toBe("ERR_MEMORY_LIMIT");
    // A prefix's stream of calls (served through shared memory), a call that spins, its dispose.
    const prefix = await sandbox.prepare({ code: "export const f = (n) => n + 1; export const spin = () => { for (;;) {} };" });
    for (let i = 0; i < 50; i++) completed(await prefix.call({ export: "f", args: [i] }));
    expect(outcome(await prefix.call({ export: "spin", args: [], limits: { cpuTimeMs: 100 } }))).toBe("ERR_CPU_TIMEOUT");
    await prefix.dispose();
    // Past UNSTOPPABLE_AFTER_MS: the worker would have said so by now.
    await new Promise((resolve) => setTimeout(resolve, 500));
    completed(await sandbox.run({ code: "export default 2" }));
    expect(workerPids(sandbox)).toEqual([pid]);
  }, 30_000);
});
