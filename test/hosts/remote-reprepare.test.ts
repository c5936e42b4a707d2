import { afterEach, describe, expect, it } from "vitest";
import { createExecutor, type Executor } from "../../src/executor/server.js";
import { createSandbox } from "../../src/index.js";

/**
 * A prefix the executor lost (it restarted) is prepared again on the next run or call; the calls
 * that arrive meanwhile wait for that one prepare.
 */
const SECRET = "cordon-remote-reprepare-test-secret-0123456789";
const cleanup: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

async function executor(port = 0): Promise<Executor> {
  const started = await createExecutor({ secret: SECRET, host: "127.0.0.1", port, logger: false });
  cleanup.push(() => started.close({ graceMs: 0 }));
  return started;
}

/** Close the executor and start a new one on the same address: it holds no prefixes. */
async function restart(service: Executor): Promise<Executor> {
  const port = Number(new URL(service.url).port);
  await service.close({ graceMs: 0 });
  return executor(port);
}

describe("re-preparing a prefix on the remote host", () => {
  it("a call aborted while it waits for a slow re-prepare is answered at its abort; the other still completes", async () => {
    const first = await executor();
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: first.url, secret: SECRET } });
    let slow = false;
    await using prefix = await sandbox.prepare({
      code: "await init(); export function get() { return 1 }",
      globals: { init: () => new Promise((resolve) => setTimeout(resolve, slow ? 4000 : 0)) },
      limits: { wallTimeMs: 10_000 },
    });
    slow = true;
    await restart(first);
    const other = prefix.call({ export: "get" });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const started = performance.now();
    const aborted = await prefix.call({ export: "get", signal: AbortSignal.timeout(100) });
    // Waiting for the whole prepare took 4 s; the abort comes at 100 ms (2.5 s: a loaded machine's round trips).
    expect(performance.now() - started).toBeLessThan(2500);
    expect(aborted).toMatchObject({ status: "aborted", error: { code: "ERR_ABORTED" } });
    expect(await other).toMatchObject({ status: "completed", value: 1 });
  });
});
