import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS } from "../../src/core/limits.js";
import { hostRunBody, SECRET, startExecutor, type TestExecutor } from "./helpers.js";

// One run slot: what waits for it, and for whom.
let service: TestExecutor;
beforeAll(async () => {
  service = await startExecutor({ sandbox: { maxConcurrentRuns: 1 } });
});
afterAll(async () => {
  await service.executor.close({ graceMs: 0 });
});

/** A `/host` run of `code` as a remote client without a signal sends it: not abortable. */
async function hostRun(code: string, signal?: AbortSignal): Promise<Response> {
  const body = {
    ...(await hostRunBody(code)),
    limits: { ...DEFAULT_LIMITS, wallTimeMs: 20_000, cpuTimeMs: 20_000 },
    abortable: false,
  };
  return fetch(`${service.url}/host`, {
    method: "POST",
    headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
}

const sleeps = (ms: number) => `export default async () => { await new Promise((r) => setTimeout(r, ${ms})); return "slept"; }`;

describe("/host runs waiting for a slot", () => {
  it("are dropped when their client goes away, even when not abortable: they hold no slot from others", async () => {
    const started = performance.now();
    const holder = hostRun(sleeps(3_000));
    await new Promise((resolve) => setTimeout(resolve, 300));
    // A client that dies with three runs queued behind the holder (each would sleep 3 s).
    const gone = new AbortController();
    const orphans = [1, 2, 3].map(() => hostRun(sleeps(3_000), gone.signal).catch(() => "aborted"));
    await new Promise((resolve) => setTimeout(resolve, 300));
    gone.abort();
    expect(await Promise.all(orphans)).toEqual(["aborted", "aborted", "aborted"]);
    // Another client's trivial run waits for the holder only (3 s), not for the orphans too (12 s).
    const other = await hostRun("export default 1");
    expect(JSON.parse(await other.text())).toMatchObject({ ok: true, value: 1 });
    expect(performance.now() - started).toBeLessThan(7_500);
    expect(JSON.parse(await (await holder).text())).toMatchObject({ ok: true, value: "slept" });
  }, 30_000);
});

describe("/health", () => {
  it("counts /host runs waiting for a slot in queueDepth", async () => {
    const runs = [hostRun(sleeps(5_000))];
    await new Promise((resolve) => setTimeout(resolve, 300));
    runs.push(hostRun(sleeps(10)), hostRun(sleeps(10)), hostRun(sleeps(10)));
    // Polled, not read once after a fixed wait: on a loaded machine the requests arrive later.
    let load: unknown;
    for (const deadline = performance.now() + 4_000; performance.now() < deadline; ) {
      load = ((await (await fetch(`${service.url}/health`)).json()) as { load: unknown }).load;
      if ((load as { queueDepth: number }).queueDepth === 3) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(load).toEqual({ activeRuns: 4, queueDepth: 3 });
    for (const run of runs) expect(JSON.parse(await (await run).text())).toMatchObject({ ok: true, value: "slept" });
  }, 30_000);
});
