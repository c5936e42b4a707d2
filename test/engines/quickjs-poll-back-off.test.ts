import { afterEach, describe, expect, it } from "vitest";
import { callBackOff } from "../../src/engines/quickjs/threads.js";
import { createSandbox, type RunResult } from "../../src/index.js";

function value(result: RunResult): unknown {
  if (!result.ok) throw new Error(`expected completed, got ${result.status}: ${JSON.stringify(result.error)}`);
  return result.value;
}

describe("QuickJS warm calls stop polling after one was held up (a lost core)", () => {
  afterEach(() => callBackOff.reset());

  it("an answer read past its window, longer than the guest computed, backs off; calls keep working meanwhile", async () => {
    // why: on a loaded machine polling made QuickJS warm calls ~5x slower (p50 1.2 ms against
    // 0.2-0.3 ms). Here the host's loop is held 5 ms right after the call is sent, as a lost core
    // would hold it: the guest computes µs, the answer is read ~5 ms later.
    callBackOff.reset();
    await using sandbox = await createSandbox({ engine: "quickjs", host: "inprocess" });
    await using prefix = await sandbox.prepare({ code: "export function add(a, b) { return a + b }" });
    for (let i = 0; i < 20; i++) expect(value(await prefix.call({ export: "add", args: [i, 1] }))).toBe(i + 1);
    // (A loaded machine may have backed off already: start from none, in the stream.)
    callBackOff.reset();
    const call = prefix.call({ export: "add", args: [1, 1] });
    // After the pool's end-of-tick gather (a later nextTick runs after it): the call is sent.
    await new Promise((resolve) => process.nextTick(resolve));
    const end = performance.now() + 5;
    while (performance.now() < end) {}
    expect(value(await call)).toBe(2);
    expect(callBackOff.active).toBe(true);
    // Backing off, the calls go quiet (neither side spins) and still answer.
    for (let i = 0; i < 20; i++) expect(value(await prefix.call({ export: "add", args: [i, 2] }))).toBe(i + 2);
  });
});
