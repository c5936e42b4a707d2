import { afterAll, describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";
import type { Sandbox } from "../../src/sandbox.js";
import { until } from "../helpers/processes.js";

const MiB = 1024 * 1024;

/**
 * Large frames leave their text and bytes behind in a worker (frame-garbage.ts). Uncollected, four
 * runs' 240 host calls of 1 MB left a worker at 550 MB resident after they ended: the budget
 * dropped with their answers, the watchdog killed the worker, and the innocent run still in it
 * failed with ERR_MEMORY_LIMIT.
 */
describe.each(["v8", "quickjs"] as const)("a %s process worker's garbage from large frames", (engine) => {
  const sandboxes: Sandbox[] = [];
  afterAll(async () => {
    await Promise.all(sandboxes.map((sandbox) => sandbox.dispose()));
  });

  it("is collected: after runs that sent 80 MB of host-call arguments, the worker's resident size comes back down", async () => {
    // A slack so large the watchdog never steps in: this measures what the worker keeps.
    const sandbox = await createSandbox({ engine, host: "process", workers: { min: 1, max: 1, rssSlackMb: 4096 } });
    sandboxes.push(sandbox);
    expect((await sandbox.run({ code: "export default 1" })).ok).toBe(true);
    const rss = () => sandbox.stats().workers?.[0]?.rssBytes ?? 0;
    await until(() => rss() > 0, 5000);
    const before = rss();
    let received = 0;
    const globals = {
      sink: async (text: string) => {
        received += text.length;
        return text.length;
      },
    };
    const code = `
      const big = "a".repeat(1 << 20);
      const sent = [];
      for (let i = 0; i < 40; i++) sent.push(sink(big));
      export default (await Promise.all(sent)).length;`;
    const limits = { memoryMb: 256, wallTimeMs: 60_000, cpuTimeMs: 60_000 };
    const results = await Promise.all([sandbox.run({ code, globals, limits }), sandbox.run({ code, globals, limits })]);
    for (const result of results) expect(result.ok && result.value).toBe(40);
    expect(received).toBe(80 * MiB);
    await until(() => rss() < before + 16 * MiB, 5000).catch(() => {});
    // Collected: 12-16 MB over `before` here; uncollected, 80-132.
    expect(Math.round((rss() - before) / MiB)).toBeLessThan(48);
  }, 90_000);
});
