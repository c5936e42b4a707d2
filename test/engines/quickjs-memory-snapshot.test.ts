import { describe, expect, it } from "vitest";
import { memorySnapshots } from "../../src/engines/quickjs/memory-snapshot.js";

const KB4 = 4096;

/** The page diff a QuickJS copy is made from (decision 013), where the template's memory grew. */
describe("a memory snapshot's pages", () => {
  const snapshots = memorySnapshots();

  it("keep what differs from a fresh memory, and of the pages past its end only those with data", () => {
    const fresh = new Uint8Array(4 * KB4);
    fresh[10] = 7; // a data segment, in both
    const grown = new Uint8Array(10 * KB4);
    grown[10] = 7;
    grown[2 * KB4 + 5] = 1; // written inside the fresh memory's length
    grown[6 * KB4 + 100] = 2; // past it: pages 4, 5, 7, 8, 9 stay zero
    grown[7 * KB4 - 1] = 3;
    const pages = snapshots.diff(fresh.buffer, grown.buffer);
    expect(pages.byteLength).toBe(10 * KB4);
    expect(pages.runs.map((run) => [run.offset / KB4, run.bytes.length / KB4])).toEqual([
      [2, 1],
      [6, 1],
    ]);
    // Applied over a fresh memory of the grown size, they give the grown memory back.
    const copy = new Uint8Array(10 * KB4);
    copy[10] = 7;
    snapshots.apply(pages, { buffer: copy.buffer });
    expect(Buffer.from(copy).equals(Buffer.from(grown))).toBe(true);
    // The pages own their bytes: the template's memory can change or go.
    grown.fill(9);
    const again = new Uint8Array(10 * KB4);
    again[10] = 7;
    snapshots.apply(pages, { buffer: again.buffer });
    expect(again[6 * KB4 + 100]).toBe(2);
  });

  it("do not fit a memory smaller than the one they were taken from", () => {
    const pages = snapshots.diff(new ArrayBuffer(KB4), new Uint8Array(4 * KB4).fill(1).buffer);
    expect(() => snapshots.apply(pages, { buffer: new ArrayBuffer(2 * KB4) })).toThrow(RangeError);
  });
});
