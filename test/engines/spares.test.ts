import { describe, expect, it } from "vitest";
import type { EngineInstance } from "../../src/engines/instance.js";
import { Spares } from "../../src/engines/spares.js";

/** Instances that take `ms` to make: what the spare logic schedules, not what an engine runs. */
function maker(ms: number) {
  const made: { id: number; ahead: boolean }[] = [];
  const create = async (_memoryMb: number, ahead: boolean) => {
    const id = made.length;
    made.push({ id, ahead });
    await new Promise((r) => setTimeout(r, ms));
    let disposed = false;
    return {
      id,
      get disposed() {
        return disposed;
      },
      dispose() {
        disposed = true;
      },
    } as unknown as EngineInstance & { id: number };
  };
  return { made, create };
}

describe("Spares", () => {
  it("makes its spares ahead, and says so to the engine (which warms only those up)", async () => {
    const { made, create } = maker(5);
    const spares = new Spares(2, 64, create);
    await new Promise((r) => setTimeout(r, 30));
    expect(spares.count).toBe(2);
    expect(made).toEqual([
      { id: 0, ahead: true },
      { id: 1, ahead: true },
    ]);
    spares.dispose();
  });

  it("a run that finds none ready waits for one already in the making instead of making another", async () => {
    const { made, create } = maker(60);
    const spares = new Spares(1, 64, create);
    await new Promise((r) => setTimeout(r, 10)); // spare 0 is half made
    const started = performance.now();
    const taken = (await spares.take(64)) as EngineInstance & { id: number };
    expect(taken.id).toBe(0);
    expect(performance.now() - started).toBeLessThan(60);
    // No instance was made inline for it; the refill that follows is made ahead.
    expect(made.filter((m) => !m.ahead)).toEqual([]);
    spares.dispose();
  });

  it("more runs than spares in the making: the rest make their own, inline", async () => {
    const { made, create } = maker(30);
    const spares = new Spares(1, 64, create);
    const [a, b] = (await Promise.all([spares.take(64), spares.take(64)])) as (EngineInstance & { id: number })[];
    expect(new Set([a.id, b.id]).size).toBe(2);
    expect(made.filter((m) => !m.ahead)).toHaveLength(1);
    spares.dispose();
  });

  it("another memory size never waits: it is made inline", async () => {
    const { made, create } = maker(20);
    const spares = new Spares(1, 64, create);
    await spares.take(128);
    expect(made.some((m) => !m.ahead)).toBe(true);
    spares.dispose();
  });
});
