import { afterEach, describe, expect, it } from "vitest";
import { startExecutor } from "./helpers.js";
import { call, prepare, untilBusy } from "./host-requests.js";

/**
 * `GET /health` (open: no secret) shows the remote hosts' prefixes against their caps, so an
 * operator sees a cap approach before prepares are refused; as aggregates only, never a client's
 * address, a key, a handle or code.
 */
const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

const MARKER = "tenant-code-7f3a";
const CODE = `export async function wait(ms) { await new Promise((r) => setTimeout(r, ms)); return "${MARKER}" }`;

async function health(url: string) {
  const response = await fetch(`${url}/health`);
  const text = await response.text();
  return { text, prefixes: (JSON.parse(text) as { prefixes: Record<string, unknown> }).prefixes };
}

describe("GET /health and the prefixes held", () => {
  it("reports counts, source size and the caps, without a client, key, handle or code", async () => {
    const options = { maxPrefixes: 8, maxPrefixesPerAddress: 3, maxPrefixMb: 4 };
    const { url, executor } = await startExecutor({ sandbox: { host: "inprocess", engine: "v8" }, ...options });
    cleanup.push(() => executor.close({ graceMs: 0 }));
    const caps = { maxPrefixes: 8, maxPrefixesPerAddress: 3, maxPrefixMb: 4 };
    expect((await health(url)).prefixes).toEqual({
      held: 0,
      busy: 0,
      clients: 0,
      mostByOneClient: 0,
      sourceMib: 0,
      endedForRoom: 0,
      refused: 0,
      caps,
    });

    const prepared = [await prepare(url, "127.0.0.1", CODE), await prepare(url, "127.0.0.1", CODE)];
    prepared.push(await prepare(url, "127.0.0.2", CODE));
    for (const p of prepared) expect(p.result.ok, p.text.slice(0, 300)).toBe(true);
    const busy = call(url, prepared[0].prefix, 3000);
    await untilBusy(url, 1);
    const during = await health(url);
    expect(during.prefixes).toMatchObject({ held: 3, busy: 1, clients: 2, mostByOneClient: 2, endedForRoom: 0, caps });
    expect(during.prefixes.sourceMib).toBeGreaterThanOrEqual(0);
    expect((await busy).status).toBe(200);

    // Past the per-address cap of 3, that client's least recently used idle prefix ends.
    for (let n = 0; n < 2; n++) expect((await prepare(url, "127.0.0.1", CODE)).result.ok).toBe(true);
    const after = await health(url);
    expect(after.prefixes).toMatchObject({ held: 4, busy: 0, clients: 2, mostByOneClient: 3, endedForRoom: 1, refused: 0 });

    for (const text of [during.text, after.text]) {
      expect(text).not.toContain("127.0.0");
      expect(text).not.toContain(MARKER);
      for (const p of prepared) expect(text).not.toContain(p.prefix);
    }
  }, 30_000);

  it("counts source in MiB as the maxPrefixMb cap does", async () => {
    const { url, executor } = await startExecutor({ sandbox: { host: "inprocess", engine: "v8" }, maxPrefixMb: 8 });
    cleanup.push(() => executor.close({ graceMs: 0 }));
    const big = `const pad = "${"x".repeat(1024 * 1024)}"; export default pad.length`;
    expect((await prepare(url, "127.0.0.1", big)).result.ok).toBe(true);
    // Kept as a module and as a script: about 2 MiB.
    const { prefixes } = await health(url);
    expect(prefixes.sourceMib).toBeGreaterThanOrEqual(2);
    expect(prefixes.sourceMib).toBeLessThan(2.2);
  }, 30_000);
});
