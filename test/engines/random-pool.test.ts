import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createRandomPool } from "../../src/engines/guest/random-pool.js";
import { createSandbox } from "../../src/index.js";

/** A pool over the host's CSPRNG that counts its draws and keeps the blocks it was given. */
function counted(blockBytes: number) {
  const draws: Uint8Array[] = [];
  const pool = createRandomPool((n) => {
    const bytes = new Uint8Array(randomBytes(n));
    draws.push(bytes);
    return bytes;
  }, blockBytes);
  return { pool, draws };
}

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("the guest realm's random pool", () => {
  it("draws a block at a time and hands each byte out once, zeroing it in the block", () => {
    const { pool, draws } = counted(4096);
    const taken: number[] = [];
    for (let i = 0; i < 256; i++) taken.push(...pool.take(16));
    expect(draws).toHaveLength(1);
    // What was handed out is the block, in order, and the block keeps none of it.
    const block = draws[0];
    expect(block.every((b) => b === 0)).toBe(true);
    expect(taken).toHaveLength(4096);
    expect(new Set(taken).size).toBeGreaterThan(200); // random bytes, not zeros
    pool.take(16);
    expect(draws).toHaveLength(2);
  });

  it("sends requests past a sixteenth of a block straight to the host, and starts afresh once drained", () => {
    const { pool, draws } = counted(4096);
    expect(pool.take(257)).toHaveLength(257);
    expect(draws.map((d) => d.length)).toEqual([257]);
    pool.take(256);
    expect(draws.map((d) => d.length)).toEqual([257, 4096]);
    pool.take(16);
    expect(draws).toHaveLength(2);
    // Drained (an instance copied from a template's memory): the rest of the block is never used.
    pool.drain();
    pool.take(16);
    expect(draws).toHaveLength(3);
  });

  it("takes a request that does not fit the rest of the block from a new one", () => {
    const { pool, draws } = counted(64);
    pool.take(2);
    pool.take(3);
    const out = pool.take(4); // 4 = the largest request; 5 + 4 fits in 64
    expect(out).toHaveLength(4);
    for (let i = 0; i < 13; i++) pool.take(4); // 61 bytes used
    expect(draws).toHaveLength(1);
    pool.take(4); // 65 > 64
    expect(draws).toHaveLength(2);
  });
});

/**
 * The CPU limit for 10,000 UUIDs. why: each randomUUID was a crossing to the host (on v8 a
 * synchronous one, charged 50 µs): 10,000 took ~0.7 s of CPU and failed a 300 ms limit; now
 * 24-27 ms. QuickJS's clock is wall time inside the VM, and its interpreter takes 100-195 ms for
 * them (it failed 300 ms too): its limit leaves room for a loaded machine.
 */
const CPU_LIMIT_MS = { v8: 300, quickjs: 1000 };

describe.each(["v8", "quickjs"] as const)("crypto.randomUUID on %s", (engine) => {
  it("gives 10,000 distinct version-4 UUIDs within a CPU limit, whatever the guest redefines", async () => {
    await using sandbox = await createSandbox({ engine, host: "inprocess" });
    const result = await sandbox.run({
      code: `export default () => {
        const seen = new Set();
        for (let i = 0; i < 5000; i++) seen.add(crypto.randomUUID());
        // The block's length and the realm's Uint8Array are the guest's to replace.
        Object.defineProperty(Object.getPrototypeOf(Uint8Array.prototype), "length", { get() { return 1e9; } });
        globalThis.Uint8Array = function () { return [255, 255]; };
        const sample = [];
        for (let i = 0; i < 5000; i++) { const u = crypto.randomUUID(); seen.add(u); if (i % 997 === 0) sample.push(u); }
        return { distinct: seen.size, sample };
      }`,
      limits: { cpuTimeMs: CPU_LIMIT_MS[engine], wallTimeMs: 5000 },
    });
    if (!result.ok) throw new Error(`${result.error.code}: ${result.error.message} ${JSON.stringify(result.stats)}`);
    const value = result.value as { distinct: number; sample: string[] };
    expect(value.distinct).toBe(10_000);
    for (const uuid of value.sample) expect(uuid).toMatch(UUID_V4);
  });

  it("differs between instances: no two runs on fresh instances start with the same bytes", async () => {
    await using sandbox = await createSandbox({ engine, host: "inprocess", spareInstances: 4 });
    const runs = await Promise.all(
      Array.from({ length: 12 }, () => sandbox.run({ code: "export default () => crypto.randomUUID()" })),
    );
    const firsts = runs.map((r) => {
      if (!r.ok) throw new Error(r.error.message);
      return r.value as string;
    });
    expect(new Set(firsts).size).toBe(12);
  });
});
