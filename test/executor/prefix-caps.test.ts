import { afterEach, describe, expect, it } from "vitest";
import type { ExecutorOptions } from "../../src/executor/server.js";
import { createSandbox } from "../../src/index.js";
import { SECRET, startExecutor } from "./helpers.js";
import { call, prepare, untilBusy } from "./host-requests.js";

/**
 * The prefixes remote hosts hold on an executor are bounded: in number, per client address, and in
 * the source they keep. Past a cap an idle one ends (the client's own first, at its own cap); when
 * all that could end are in use, the prepare fails with ERR_CAPACITY naming the option.
 */
const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

async function executor(options: ExecutorOptions) {
  const service = await startExecutor({ sandbox: { host: "inprocess", engine: "v8" }, ...options });
  cleanup.push(() => service.executor.close({ graceMs: 0 }));
  return service;
}

describe("the prefixes an executor holds for remote hosts", () => {
  it("past one address's share its own least recently used idle prefix ends, not another client's", async () => {
    const { url } = await executor({ maxPrefixes: 4, maxPrefixesPerAddress: 2 });
    const other = await prepare(url, "127.0.0.2");
    const first = await prepare(url);
    const second = await prepare(url);
    const third = await prepare(url);
    for (const p of [other, first, second, third]) expect(p.result.ok, p.text.slice(0, 400)).toBe(true);
    expect((await call(url, first.prefix, 0)).text).toContain("ERR_PREFIX_GONE");
    for (const p of [second, third]) expect((await call(url, p.prefix, 0)).status).toBe(200);
    expect((await call(url, other.prefix, 0, "127.0.0.2")).status).toBe(200);
  });

  it("refuses a prepare with ERR_CAPACITY when every prefix that could end is in use", async () => {
    const { url } = await executor({ maxPrefixes: 3, maxPrefixesPerAddress: 2 });
    const a = await prepare(url);
    const b = await prepare(url);
    // Calls long enough to outlast the prepares below even on a loaded machine (esbuild runs in each).
    const busy = [call(url, a.prefix, 4000), call(url, b.prefix, 4000)];
    await untilBusy(url, 2);
    const refused = await prepare(url);
    expect(refused.result).toMatchObject({ ok: false, error: { code: "ERR_CAPACITY" } });
    expect(!refused.result.ok && refused.result.error.message).toMatch(/maxPrefixesPerAddress/);
    expect(refused.prefix).toBeUndefined();
    // Another client still has room, up to the executor's own cap; past it, all in use: refused.
    const c = await prepare(url, "127.0.0.2");
    expect(c.result.ok).toBe(true);
    const busyToo = call(url, c.prefix, 3000, "127.0.0.2");
    await untilBusy(url, 3);
    const full = await prepare(url, "127.0.0.2");
    expect(full.result).toMatchObject({ ok: false, error: { code: "ERR_CAPACITY" } });
    expect(!full.result.ok && full.result.error.message).toMatch(
      /holds 3 prefixes, all in use.*maxPrefixes, cordon serve --max-prefixes\)/,
    );
    for (const answer of await Promise.all([...busy, busyToo])) expect(answer.status).toBe(200);
    // Once idle, the oldest ends to make room.
    expect((await prepare(url)).result.ok).toBe(true);
  }, 30_000);

  it("bounds the source the prefixes keep; through a sandbox, prepare throws with ERR_CAPACITY", async () => {
    const { url } = await executor({ maxPrefixMb: 2 });
    // A source is kept twice (as a module and as a script): about 2 characters a character of code.
    const big = `const pad = "${"x".repeat(1100 * 1024)}"; export default pad.length`;
    const refused = await prepare(url, undefined, big);
    expect(refused.result).toMatchObject({ ok: false, error: { code: "ERR_CAPACITY" } });
    expect(!refused.result.ok && refused.result.error.message).toMatch(/more than the 2\.0 MiB .*maxPrefixMb/);
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    const half = `const pad = "${"x".repeat(600 * 1024)}"; export function f() { return pad.length }`;
    await using kept = await sandbox.prepare({ code: half });
    expect(await kept.call({ export: "f" })).toMatchObject({ value: 600 * 1024 });
    // The first is idle: it ends to make room for the second, and is prepared again when called.
    await using second = await sandbox.prepare({ code: half.replace("pad.length", "pad.length + 1") });
    expect(await second.call({ export: "f" })).toMatchObject({ value: 600 * 1024 + 1 });
    expect(await kept.call({ export: "f" })).toMatchObject({ value: 600 * 1024, stats: { warm: false } });
    await expect(sandbox.prepare({ code: big })).rejects.toMatchObject({ result: { error: { code: "ERR_CAPACITY" } } });
  }, 30_000);

  it("refuses caps that are not positive whole numbers", async () => {
    await expect(executor({ maxPrefixes: 0 })).rejects.toThrow(/maxPrefixes must be a positive number/);
    await expect(executor({ maxPrefixesPerAddress: 1.5 })).rejects.toThrow(/maxPrefixesPerAddress must be a whole number/);
    await expect(executor({ maxPrefixMb: -1 })).rejects.toThrow(/maxPrefixMb must be a positive number/);
  });
});
