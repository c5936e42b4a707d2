import { describe, expect, it } from "vitest";
import { createCodec } from "../../src/core/codec.js";

/**
 * Objects the codec's extension owns (Request, Response, Headers) have a prototype chain no
 * builtin brand knows. The encoder asks the extension first: each builtin brand check throws on
 * a mismatch, and a Headers returned from a warm call cost ~55 µs of those throws (charge 61 →
 * 13 µs once asked first). Measured as a ratio to the same wire shape as plain data, so the
 * machine's speed cancels out.
 */
class Owned {
  constructor(readonly n: number) {}
}

function cpuMsOf(work: () => void): number {
  let best = Number.POSITIVE_INFINITY;
  for (let round = 0; round < 5; round++) {
    const before = process.cpuUsage();
    work();
    const used = process.cpuUsage(before);
    best = Math.min(best, (used.user + used.system) / 1000);
  }
  return best;
}

describe("codec: the extension's objects", () => {
  it("are encoded without the builtin brand checks: about as cheap as their wire shape as plain data", () => {
    const codec = createCodec();
    codec.extend({
      encode: (value) => (value instanceof Owned ? { $: "H", h: [["n", String(value.n)]] } : undefined),
      decode: () => undefined,
    });
    const owned = Array.from({ length: 5000 }, (_, n) => new Owned(n));
    const plain = Array.from({ length: 5000 }, (_, n) => ({ q: "H", h: [["n", String(n)]] }));
    expect(codec.encode(owned[7])).toBe('{"$":"H","h":[["n","7"]]}');
    const ownedMs = cpuMsOf(() => codec.encode(owned));
    const plainMs = cpuMsOf(() => codec.encode(plain));
    // Asked last, after every brand check had thrown: 10x and more.
    expect(ownedMs / Math.max(plainMs, 0.5)).toBeLessThan(4);
  });

  it("a builtin given an extension class's prototype is still encoded by its brand", () => {
    // The real extension recognises its objects by their state (a WeakMap), not their chain.
    const mine = new WeakSet<object>();
    const codec = createCodec();
    codec.extend({
      encode: (value) => (mine.has(value) ? { $: "H", h: [] } : undefined),
      decode: () => undefined,
    });
    const owned = new Owned(1);
    mine.add(owned);
    const map = Object.setPrototypeOf(new Map([[1, 2]]), Owned.prototype);
    expect(codec.encode(owned)).toBe('{"$":"H","h":[]}');
    expect(codec.encode(map)).toContain('"$":"m"');
    // A chain cannot make an object the extension's either.
    expect(() => codec.encode(Object.setPrototypeOf({}, Owned.prototype))).toThrow(/instance of Owned; only data crosses/);
  });
});
