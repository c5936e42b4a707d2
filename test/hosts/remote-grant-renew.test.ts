import { afterEach, describe, expect, it } from "vitest";
import { createExecutor, type Executor } from "../../src/executor/server.js";
import { createSandbox } from "../../src/index.js";

/**
 * A prefix's grant is renewed by each of its requests. Requests of one prefix overlap: the grant a
 * later (or later arriving) request brings may expire before the one the executor holds, and
 * must not replace it, or the longer call's host functions fail with an expired grant.
 */
const SECRET = "cordon-remote-grant-renew-test-secret-0123456789";
const cleanup: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

async function executor(): Promise<Executor> {
  const started = await createExecutor({ secret: SECRET, host: "127.0.0.1", port: 0, logger: false });
  cleanup.push(() => started.close({ graceMs: 0 }));
  return started;
}

describe("renewing a remote prefix's grant", () => {
  it("a shorter call made during a long one does not cut the long one's grant short", async () => {
    const service = await executor();
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    let entered: () => void = () => {};
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    await using prefix = await sandbox.prepare({
      code: `export async function long() { await gate(); return await ping() }
        export function short() { return "short" }`,
      globals: {
        gate: () => {
          entered();
          return gate;
        },
        ping: () => "pong",
      },
    });
    // The long call's grant lives 30 s + the slack; the short one's 100 ms + the slack (10 s).
    const long = prefix.call({ export: "long", limits: { wallTimeMs: 30_000 } });
    await inside;
    expect(await prefix.call({ export: "short", limits: { wallTimeMs: 100 } })).toMatchObject({ value: "short" });
    // Past the short call's grant, within the long one's.
    await new Promise((resolve) => setTimeout(resolve, 10_600));
    open();
    const result = await long;
    expect(result.ok, JSON.stringify(result.ok ? null : result.error)).toBe(true);
    expect(result).toMatchObject({ value: "pong" });
  }, 40_000);
});
