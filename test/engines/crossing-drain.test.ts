import { describe, expect, it } from "vitest";
import { CrossingDrain } from "../../src/engines/v8/crossing-drain.js";

/** A crossing the test ends by hand: `cross` records its start, `end` settles it. */
function crossings() {
  const started: string[] = [];
  const ends = new Map<string, (value: unknown) => void>();
  return {
    started,
    cross: (name: string) => () => {
      started.push(name);
      return new Promise<unknown>((resolve) => ends.set(name, resolve));
    },
    end: async (name: string, value: unknown = undefined) => {
      ends.get(name)?.(value);
      // The drain hears of it in a reaction, and starts the waiting ones in another.
      for (let i = 0; i < 4; i++) await Promise.resolve();
    },
  };
}

describe("CrossingDrain", () => {
  it("lets crossings under the budget through at once, however many are in flight", () => {
    const drain = new CrossingDrain(100);
    const { started, cross } = crossings();
    for (let i = 0; i < 10; i++) void drain.through(9, cross(`c${i}`));
    expect(started).toHaveLength(10);
    expect(drain.queued).toBe(0);
  });

  it("past the budget, holds the next crossings until none is in flight, in order", async () => {
    const drain = new CrossingDrain(100);
    const { started, cross, end } = crossings();
    void drain.through(60, cross("a"));
    void drain.through(60, cross("b"));
    const c = drain.through(1, cross("c"));
    void drain.through(1, cross("d"));
    expect(started).toEqual(["a", "b"]);
    await end("a");
    expect(started).toEqual(["a", "b"]);
    await end("b");
    expect(started).toEqual(["a", "b", "c", "d"]);
    await end("c", "answer");
    await expect(c).resolves.toBe("answer");
  });

  it("counts a crossing's string result toward the budget", async () => {
    const drain = new CrossingDrain(100);
    const { started, cross, end } = crossings();
    void drain.through(1, cross("a"));
    void drain.through(1, cross("b"));
    await end("a", "x".repeat(200));
    void drain.through(1, cross("c"));
    expect(started).toEqual(["a", "b"]);
    await end("b");
    expect(started).toEqual(["a", "b", "c"]);
  });

  it("a crossing that throws or rejects still counts as ended", async () => {
    const drain = new CrossingDrain(10);
    void drain.through(20, () => Promise.reject(new Error("gone"))).catch(() => {});
    const thrown = drain.through(20, () => {
      throw new Error("disposed");
    });
    await expect(thrown).rejects.toThrow("disposed");
    let ran = false;
    await drain.through(1, async () => {
      ran = true;
    });
    expect(ran).toBe(true);
  });
});
