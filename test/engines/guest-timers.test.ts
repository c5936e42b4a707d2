import { describe, expect, it } from "vitest";
import { MAX_PENDING_TIMERS } from "../../src/core/limits.js";
import { GuestTimers } from "../../src/engines/guest-timers.js";
import { holdLoop } from "../helpers/host-loop.js";

/** Real Node timers: `fired` lists ids as they fire; `settled` resolves once `count` have. */
function recorder(count: number) {
  const fired: number[] = [];
  let done!: () => void;
  const settled = new Promise<void>((resolve) => {
    done = resolve;
  });
  const timers = new GuestTimers((id) => {
    fired.push(id);
    if (fired.length === count) done();
  });
  return { timers, fired, settled };
}

describe("guest timers", () => {
  it("fires by when each is due, counted from when it was set, ties in the order set", async () => {
    const { timers, fired, settled } = recorder(4);
    const now = Date.now();
    timers.set(1, 100, now - 50); // due now + 50
    timers.set(2, 49, now); // due now + 49
    timers.set(3, 60, now - 10); // due now + 50, set after 1
    timers.set(4, 0, now - 5_000); // long overdue
    await settled;
    expect(fired).toEqual([4, 2, 1, 3]);
  });

  it("fires timers due at one moment in the order set, whatever delay Node was given for each", async () => {
    // The outbox's case: timers set at one moment, read over several milliseconds, each given
    // what was left of its delay; Node keeps a list per delay, and lists due at the same
    // moment fire in no order of the guest's.
    const { timers, fired, settled } = recorder(60);
    const setAt = Date.now();
    for (let id = 1; id <= 60; id++) {
      timers.set(id, 40, setAt);
      if (id % 6 === 0) holdLoop(1);
    }
    await settled;
    expect(fired).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
  });

  it("clears one, clears all, re-arms an id, and takes no more than the pending limit", async () => {
    const { timers, fired, settled } = recorder(2);
    timers.set(1, 5);
    timers.set(2, 5);
    timers.clear(1);
    timers.set(2, 15); // re-armed: once, at the new delay
    timers.set(3, -1); // a clear of a timer it never had
    timers.set(4, 10);
    await settled;
    expect(fired).toEqual([4, 2]);

    const many = recorder(MAX_PENDING_TIMERS);
    for (let id = 1; id <= MAX_PENDING_TIMERS + 5; id++) many.timers.set(id, 1);
    await many.settled;
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(many.fired).toHaveLength(MAX_PENDING_TIMERS);

    const cleared = recorder(1);
    cleared.timers.set(1, 1);
    cleared.timers.set(2, 1);
    cleared.timers.clearAll();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(cleared.fired).toEqual([]);
  });
});
