import { describe, expect, it } from "vitest";
import { createInspect } from "../../src/engines/guest/inspect.js";

describe("log formatting (guest side)", () => {
  it("cuts a line at its cap with the methods captured at creation, whatever replaced them since", () => {
    const format = createInspect();
    const stringSlice = String.prototype.slice;
    const arraySlice = Array.prototype.slice;
    const whole = function (this: unknown) {
      return this;
    };
    try {
      String.prototype.slice = whole as typeof stringSlice;
      Array.prototype.slice = whole as typeof arraySlice;
      expect(format(["x".repeat(100_000)], 100)).toHaveLength(100);
      expect(format(["a", "b".repeat(100_000)], 100)).toHaveLength(100);
      expect(format([Array.from({ length: 500 }, (_, i) => i)], 100_000)).toContain("... 400 more items");
    } finally {
      String.prototype.slice = stringSlice;
      Array.prototype.slice = arraySlice;
    }
  });
});
