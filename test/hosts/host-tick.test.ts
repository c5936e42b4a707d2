import { describe, expect, it } from "vitest";
import { BUSY_TICK_MS, IDLE_TICK_MS, loopHeldMs, watchLoop } from "../../src/hosts/process/loop-stalls.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Ticks `watcher` gets in `ms` while `busy` says what it says. */
async function ticksIn(ms: number, busy: boolean): Promise<number> {
  let ticks = 0;
  const unwatch = watchLoop({ tick: () => ticks++, busy: () => busy });
  try {
    await sleep(ms);
  } finally {
    unwatch();
  }
  return ticks;
}

/**
 * The process host's one timer (loop-stalls.ts): every pool's RSS watchdog on it, faster while
 * work is in flight. An idle sandbox's two timers of their own cost 16.7 ms of CPU a second here.
 */
describe("the process host's tick", () => {
  it(`ticks every ${BUSY_TICK_MS} ms while a watcher is busy, every ${IDLE_TICK_MS} ms while none is`, async () => {
    const busy = await ticksIn(1000, true);
    const idle = await ticksIn(1000, false);
    // 40 and 20 on a quiet machine; a loaded one makes every tick late by about the same.
    expect(busy).toBeLessThanOrEqual(41);
    expect(idle).toBeLessThanOrEqual(21);
    expect(idle).toBeGreaterThanOrEqual(8);
    expect(busy / idle).toBeGreaterThan(1.3);
  });

  it("is one timer for every watcher: each ticks on it, and it stops with the last", async () => {
    const seen: string[] = [];
    const stopA = watchLoop({ tick: () => seen.push("a") });
    const stopB = watchLoop({ tick: () => seen.push("b") });
    await sleep(IDLE_TICK_MS * 3);
    stopA();
    stopA();
    const count = seen.length;
    expect(seen.filter((s) => s === "a").length).toBe(seen.filter((s) => s === "b").length);
    await sleep(IDLE_TICK_MS * 2);
    expect(seen.slice(count).every((s) => s === "b")).toBe(true);
    expect(seen.length).toBeGreaterThan(count);
    stopB();
    const after = seen.length;
    await sleep(IDLE_TICK_MS * 2);
    expect(seen.length).toBe(after);
  });

  it("counts a hold of the loop as held time, and nothing while it runs free", async () => {
    const unwatch = watchLoop();
    try {
      const before = loopHeldMs();
      const end = performance.now() + 300;
      while (performance.now() < end) {}
      expect(loopHeldMs() - before).toBeGreaterThan(200);
      await sleep(IDLE_TICK_MS * 2);
      const free = loopHeldMs();
      await sleep(IDLE_TICK_MS * 4);
      expect(loopHeldMs() - free).toBeLessThan(IDLE_TICK_MS);
    } finally {
      unwatch();
    }
  });
});
