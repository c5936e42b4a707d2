import { afterEach, describe, expect, it } from "vitest";
import { createExecutor, type Executor } from "../../src/executor/server.js";
import { createSandbox, type Sandbox } from "../../src/index.js";
import { alive, disposedAfterEach, until, workerPids } from "../helpers/processes.js";

/**
 * Calls waiting for their prefix to be prepared again are visible in stats(): in activeRuns, and
 * in their prefix's `queued` (as calls waiting for a free instance are in process).
 */
const SECRET = "cordon-waiting-stats-test-secret-0123456789ab";
const cleanup: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});
const kept = disposedAfterEach();

const SLOW_PREFIX = "await init(); export function get(n) { return n }";

async function killWorkers(s: Sandbox): Promise<void> {
  const killed = workerPids(s);
  for (const pid of killed) process.kill(pid, "SIGKILL");
  await until(() => killed.every((pid) => !alive(pid)) && workerPids(s).every((pid) => !killed.includes(pid)), 5000);
}

/** The stats while `waiting` calls wait for a slow re-prepare; then the calls' results. */
async function whileWaiting(s: Sandbox, lose: () => Promise<unknown>, state: { slow: boolean }) {
  const prefix = await s.prepare({
    code: SLOW_PREFIX,
    globals: { init: () => new Promise((resolve) => setTimeout(resolve, state.slow ? 1500 : 0)) },
    limits: { wallTimeMs: 10_000 },
  });
  state.slow = true;
  await lose();
  const calls = [
    prefix.call({ export: "get", args: [1] }),
    prefix.call({ export: "get", args: [2] }),
    prefix.run({ code: "export default 3" }),
  ];
  await new Promise((resolve) => setTimeout(resolve, 400));
  const stats = s.stats();
  const results = await Promise.all(calls);
  await prefix.dispose();
  return { stats, results };
}

describe("stats() while calls wait for a prefix's re-prepare", () => {
  it.each(["v8", "quickjs"] as const)(
    "the process host (%s) counts them in activeRuns and their prefix's queued",
    async (engine) => {
      const s = kept(await createSandbox({ engine, host: "process" }));
      const { stats, results } = await whileWaiting(s, () => killWorkers(s), { slow: false });
      expect(results.map((r) => r.ok && r.value)).toEqual([1, 2, 3]);
      expect(stats.activeRuns).toBe(3);
      expect(stats.prefixes).toHaveLength(1);
      expect(stats.prefixes[0]).toMatchObject({ warm: 0, busy: 0, queued: 3 });
    },
  );

  it("the remote host counts them in activeRuns and their prefix's queued, not busy", async () => {
    const first = await createExecutor({ secret: SECRET, host: "127.0.0.1", port: 0, logger: false });
    let current: Executor = first;
    cleanup.push(() => current.close({ graceMs: 0 }));
    const s = kept(await createSandbox({ engine: "v8", host: "remote", remote: { url: first.url, secret: SECRET } }));
    const restart = async () => {
      const port = Number(new URL(first.url).port);
      await first.close({ graceMs: 0 });
      current = await createExecutor({ secret: SECRET, host: "127.0.0.1", port, logger: false });
    };
    const { stats, results } = await whileWaiting(s, restart, { slow: false });
    expect(results.map((r) => r.ok && r.value)).toEqual([1, 2, 3]);
    expect(stats.activeRuns).toBe(3);
    expect(stats.prefixes).toHaveLength(1);
    expect(stats.prefixes[0]).toMatchObject({ warm: 0, busy: 0, queued: 3 });
  });
});
