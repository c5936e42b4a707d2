import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import { FloodGuard, MAX_STDIN_BACKLOG } from "../../src/hosts/process/flood-guard.js";
import { watchLoop } from "../../src/hosts/process/loop-stalls.js";
import { holdLoop, watchLoopGaps } from "../helpers/host-loop.js";
import { value } from "../helpers/results.js";

/**
 * The host judges a worker by what it hears from it, and hears nothing while its own loop is
 * held. Found by a red-team pass: a guest awaiting 40 answers of a host function returning one
 * 8 MB string held the host's loop 3.8 s (every answer encoded and framed in one turn); the flood
 * guard then read the worker as "reading 0 KB/s", or the backstop as "stopped answering", and
 * ended it, failing another tenant's run in that worker.
 */
describe("a host whose own loop is held", () => {
  it("does not end a worker for the silence of its own hold, and the worker's other runs go on", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", workers: { min: 1, max: 1 } });
    await sandbox.run({ code: "export default 1" });
    const victim = sandbox.run({
      code: "export default async () => { await new Promise((r) => setTimeout(r, 1500)); return 'victim ok' }",
      limits: { wallTimeMs: 20_000 },
    });
    // The host function holds this process's loop past the holder's wall time (+1 s): the backstop
    // fires after it, on a worker it has not heard from for 4.5 s, through no fault of the worker.
    const holder = await sandbox.run({
      code: "export default async () => { await holdHost(); return 'not reached' }",
      globals: { holdHost: async () => holdLoop(4500) },
      limits: { wallTimeMs: 2000 },
    });
    expect(holder.ok ? "completed" : holder.error.code).toBe("ERR_WALL_TIMEOUT");
    expect(value(await victim)).toBe("victim ok");
  });

  it("judges a worker's reading over the time its loop ran, not the time it was held", async () => {
    const unwatch = watchLoop();
    try {
      const guard = new FloodGuard();
      const unread = MAX_STDIN_BACKLOG + 1;
      expect(guard.backlog(unread, 0)).toBeUndefined();
      // 3.5 s held: nothing could be fed, nothing read.
      holdLoop(3500);
      expect(guard.backlog(unread, 0)).toBeUndefined();
      // 3.5 s with the loop free and nothing read: that worker is not reading.
      await new Promise((resolve) => setTimeout(resolve, 3500));
      expect(guard.backlog(unread, 0)).toMatch(/unread, reading 0 KB\/s/);
    } finally {
      unwatch();
    }
  });

  it("encodes one large host-call answer a turn: many at once do not hold the loop", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "process", workers: { min: 1, max: 1 } });
    const big = "y".repeat(8 * 1024 * 1024);
    const gaps = watchLoopGaps(5);
    let longest: number;
    try {
      const result = await sandbox.run({
        code: "export default async () => (await Promise.all(Array.from({ length: 20 }, () => big()))).length",
        globals: { big: async () => big },
        limits: { memoryMb: 512, wallTimeMs: 20_000, cpuTimeMs: 20_000 },
      });
      expect(value(result)).toBe(20);
    } finally {
      ({ longest } = gaps.stop());
    }
    // All twenty in one turn held it ~2 s here; one a turn, ~0.2 s at a time.
    expect(longest).toBeLessThan(1000);
  });
});
