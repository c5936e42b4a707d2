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

/** Resolves once `done()` holds (the machine is shared and slow: up to 5 s). */
async function until(done: () => boolean): Promise<void> {
  const deadline = performance.now() + 5000;
  while (!done() && performance.now() < deadline) await new Promise((r) => setTimeout(r, 5));
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
    // Spare 0 itself (an instance made for the take would be id 1, not made ahead), not a time
    // bound: the 60 ms one failed when the machine's timers ran late.
    const taken = (await spares.take(64)) as EngineInstance & { id: number };
    expect(taken.id).toBe(0);
    // No instance was made inline for it; the refill that follows is made ahead.
    expect(made.filter((m) => !m.ahead)).toEqual([]);
    spares.dispose();
  });

  it("a take prefers a spare on a site its caller does not occupy (a QuickJS thread), else takes the newest", async () => {
    const sites = [{ thread: 0 }, { thread: 1 }];
    const { create } = maker(1);
    const onSites = async (memoryMb: number, ahead: boolean) => {
      const instance = await create(memoryMb, ahead);
      return Object.assign(instance, { site: sites[instance.id % 2] });
    };
    const spares = new Spares(3, 64, onSites);
    await until(() => spares.count === 3);
    const id = (instance: EngineInstance) => (instance as EngineInstance & { id: number }).id;
    // Ready: 0 and 2 on thread 0, 1 on thread 1. A caller on thread 0 gets the one on thread 1.
    expect(id(await spares.take(64, new Set([sites[0]])))).toBe(1);
    // Every site occupied, or none named: the newest ready, as before.
    expect(id(await spares.take(64, new Set(sites)))).toBe(2);
    expect(id(await spares.take(64))).toBe(0);
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

  it("a take waiting when the spares are disposed fails with ERR_INSTANCE_RESET and makes nothing", async () => {
    const { made, create } = maker(40);
    const spares = new Spares(1, 64, create);
    const waiting = spares.take(64);
    spares.dispose();
    await expect(waiting).rejects.toMatchObject({ code: "ERR_INSTANCE_RESET" });
    // Before the fix it made an instance of its own, which then ran after dispose.
    expect(made.filter((m) => !m.ahead)).toEqual([]);
  });

  it("an instance made inline while the spares are disposed is disposed, not returned", async () => {
    const { create } = maker(40);
    const instances: { disposed: boolean }[] = [];
    const spares = new Spares(0, 64, async (memoryMb, ahead) => {
      const instance = await create(memoryMb, ahead);
      instances.push(instance as unknown as { disposed: boolean });
      return instance;
    });
    const taking = spares.take(128);
    spares.dispose();
    await expect(taking).rejects.toMatchObject({ code: "ERR_INSTANCE_RESET" });
    expect(instances.map((i) => i.disposed)).toEqual([true]);
  });

  it("refills a large pool in batches, not all in one turn of the event loop", async () => {
    const { made, create } = maker(5);
    const spares = new Spares(40, 64, create);
    // Synchronously, only the first batch is started.
    expect(made.length).toBeLessThan(10);
    const until = performance.now() + 5000;
    while (spares.count < 40 && performance.now() < until) await new Promise((r) => setTimeout(r, 10));
    expect(spares.count).toBe(40);
    expect(made.length).toBe(40);
    spares.dispose();
  });

  it("with a spare still ready, the refill waits for the run in progress to end (it made one beside the run)", async () => {
    const { made, create } = maker(5);
    const spares = new Spares(2, 64, create);
    await until(() => spares.count === 2);
    spares.runStarted();
    await spares.take(64);
    // Longer than the refill delay: the run is still in progress, one spare is ready.
    await new Promise((r) => setTimeout(r, 30));
    expect(made).toHaveLength(2);
    spares.runEnded();
    await until(() => spares.count === 2);
    expect(made).toHaveLength(3);
    spares.dispose();
  });

  it("with none ready, the refill starts during the run, as before", async () => {
    const { made, create } = maker(5);
    const spares = new Spares(1, 64, create);
    await until(() => spares.count === 1);
    spares.runStarted();
    await spares.take(64);
    await until(() => spares.count === 1);
    expect(made).toHaveLength(2);
    spares.runEnded();
    spares.dispose();
  });
});
