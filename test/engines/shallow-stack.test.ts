import { describe, expect, it } from "vitest";
import { fromShallowStack } from "../../src/engines/v8/shallow-stack.js";

/** isolated-vm's `apply` captures its caller's stack: cordon makes the call from a shallow one. */
describe("a crossing made from a shallow stack", () => {
  it("runs from a stack of a few frames however deep its caller, in the order calls were made", async () => {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 100;
    try {
      const order: number[] = [];
      const depths: number[] = [];
      const frames = () => (new Error().stack ?? "").split("\n").length - 1;
      const deep = (n: number, i: number): Promise<number> =>
        n === 0
          ? fromShallowStack(async () => {
              order.push(i);
              depths.push(frames());
              return i;
            })
          : deep(n - 1, i);
      const measured = (n: number): number => (n === 0 ? frames() : measured(n - 1));
      const callerDepth = measured(40);
      const calls = [deep(40, 1), deep(40, 2), deep(5, 3)];
      // Not yet: the calls leave once the code that made them has returned.
      expect(order).toEqual([]);
      expect(await Promise.all(calls)).toEqual([1, 2, 3]);
      expect(order).toEqual([1, 2, 3]);
      expect(callerDepth).toBeGreaterThan(40);
      for (const depth of depths) expect(depth).toBeLessThan(callerDepth - 30);
    } finally {
      Error.stackTraceLimit = limit;
    }
  });

  it("turns a call that throws into a rejected crossing", async () => {
    await expect(
      fromShallowStack(() => {
        throw new Error("Isolate is disposed");
      }),
    ).rejects.toThrow("Isolate is disposed");
  });
});
