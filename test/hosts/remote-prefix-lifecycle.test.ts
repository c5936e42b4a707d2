import { afterEach, describe, expect, it } from "vitest";
import { createExecutor, type Executor } from "../../src/executor/server.js";
import { createSandbox } from "../../src/index.js";
import { prepareBody } from "../executor/host-requests.js";
import { engineOf } from "../../src/sandbox.js";

/** A remote prefix's life on the executor: disposal, a dispose racing a call, a restart mid-call. */
const SECRET = "cordon-remote-prefix-lifecycle-secret-0123456789";
const cleanup: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

async function executor(port = 0): Promise<Executor> {
  const started = await createExecutor({
    secret: SECRET,
    host: "127.0.0.1",
    port,
    logger: false,
    sandbox: { host: "inprocess", engine: "v8" },
  });
  cleanup.push(() => started.close({ graceMs: 0 }));
  return started;
}

const held = (service: Executor) => engineOf(service.sandbox).stats().prefixes.length;

describe("a remote prefix's lifecycle on the executor", () => {
  it("disposing the sandbox ends its prefixes on the executor", async () => {
    const service = await executor();
    const sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    for (let i = 0; i < 3; i++) await sandbox.prepare({ code: `export const n = ${i}`, globals: { f: () => i } });
    expect(held(service)).toBe(3);
    await sandbox.dispose();
    await expect.poll(() => held(service), { timeout: 5_000 }).toBe(0);
  });

  it("a dispose made during a call lets that call's host calls finish, then ends the prefix", async () => {
    const service = await executor();
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    const prefix = await sandbox.prepare({
      code: "export async function f() { await pause(); return await ping() }",
      globals: { pause: () => new Promise((resolve) => setTimeout(resolve, 300)), ping: () => "pong" },
    });
    const call = prefix.call({ export: "f" });
    await new Promise((resolve) => setTimeout(resolve, 100));
    await prefix.dispose();
    expect(await call).toMatchObject({ status: "completed", value: "pong" });
    await expect.poll(() => held(service), { timeout: 5_000 }).toBe(0);
  });

  it("a restart mid-call fails that call (past the shutdown's grace); the next is prepared again and calls the host", async () => {
    const first = await executor();
    const port = Number(new URL(first.url).port);
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: first.url, secret: SECRET } });
    await using prefix = await sandbox.prepare({
      code: "let calls = 0; export async function f(ms) { calls++; await pause(ms); return [await ping(), calls] }",
      globals: { pause: (ms: number) => new Promise((resolve) => setTimeout(resolve, ms)), ping: () => "pong" },
    });
    const cut = prefix.call({ export: "f", args: [6_000] });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await first.close({ graceMs: 0 });
    expect(await cut).toMatchObject({ ok: false, error: { code: "ERR_EXECUTOR_UNREACHABLE" } });
    const second = await executor(port);
    const again = await prefix.call({ export: "f", args: [0] });
    expect(again).toMatchObject({ status: "completed", value: ["pong", 1], stats: { warm: false } });
    expect(await prefix.call({ export: "f", args: [0] })).toMatchObject({ value: ["pong", 2], stats: { warm: true } });
    expect(held(second)).toBe(1);
  }, 30_000);

  it("a dispose made while a call waits for the prefix to be prepared again: the call completes, then the prefix ends", async () => {
    const first = await executor();
    const port = Number(new URL(first.url).port);
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: first.url, secret: SECRET } });
    let slow = false;
    const prefix = await sandbox.prepare({
      code: "await init(); export async function f() { return await ping() }",
      globals: { init: () => new Promise((resolve) => setTimeout(resolve, slow ? 500 : 0)), ping: () => "pong" },
    });
    slow = true;
    await first.close({ graceMs: 0 });
    const second = await executor(port);
    const call = prefix.call({ export: "f" });
    await new Promise((resolve) => setTimeout(resolve, 100));
    await prefix.dispose();
    expect(await call).toMatchObject({ status: "completed", value: "pong", stats: { warm: false } });
    await expect.poll(() => held(second), { timeout: 5_000 }).toBe(0);
  }, 30_000);

  it("a prefix whose client went away while it was prepared is not held (nobody has its handle)", async () => {
    const service = await executor();
    const body = await prepareBody("const end = Date.now() + 800; while (Date.now() < end); export const n = 1");
    const gone = fetch(`${service.url}/host`, {
      method: "POST",
      headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(200),
    });
    await expect(gone).rejects.toThrow();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(held(service)).toBe(0);
  }, 30_000);
});
