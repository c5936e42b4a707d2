import { describe, expect, it } from "vitest";
import { createLogRing, LOG_RING_LAYOUT } from "../../src/engines/guest/log-ring.js";
import { LogRing } from "../../src/engines/v8/log-ring.js";

/** The two sides of the log ring (v8's console lines without a crossing), in this thread. */
function pair() {
  const host = new LogRing();
  const guest = createLogRing(Atomics, LOG_RING_LAYOUT);
  guest.attach(host.memory);
  const read = () => {
    const lines: { level: string; message: string; index: number; epochMs: number }[] = [];
    host.drain((level, message, index, epochMs) => lines.push({ level, message, index, epochMs }));
    return lines;
  };
  const ctl = new Int32Array(host.memory, 0, LOG_RING_LAYOUT.headerBytes / 4);
  const data = new Uint16Array(host.memory, LOG_RING_LAYOUT.headerBytes, LOG_RING_LAYOUT.capacity);
  return { host, guest, read, ctl, data };
}

describe("log ring", () => {
  it("hands lines over in order with their level, call index and time, across many wraps", () => {
    const { guest, read } = pair();
    const levels = LOG_RING_LAYOUT.levels;
    const sent: { level: string; message: string; index: number }[] = [];
    const got: ReturnType<typeof read> = [];
    const before = Date.now();
    // Lines of every length up to the longest, 4,000 in all: ~200 times the ring's room. The
    // odd lengths put entries (and a surrogate pair: "😀") across the end of the memory.
    for (let i = 0; i < 4000; i++) {
      const line = { level: levels[i % 5], message: `${i}:${"😀a".repeat((i * 37) % 600)}`, index: (i * 7919) % 70_000 };
      if (!guest.write(line.level, line.message, line.index)) {
        got.push(...read());
        expect(guest.write(line.level, line.message, line.index)).toBe(true);
      }
      sent.push(line);
    }
    got.push(...read());
    expect(got.map(({ level, message, index }) => ({ level, message, index }))).toEqual(sent);
    for (const line of got) {
      expect(line.epochMs).toBeGreaterThanOrEqual(before);
      expect(line.epochMs).toBeLessThanOrEqual(Date.now());
    }
  });

  it("refuses what must cross instead: a full ring, a long line, a level it does not know, no memory", () => {
    const { guest, read } = pair();
    const line = "x".repeat(1000);
    let written = 0;
    while (guest.write("log", line, 0)) written++;
    // 8 units of header a line: 8,192 / 1,008.
    expect(written).toBe(8);
    expect(read()).toHaveLength(8);
    expect(guest.write("log", line, 0)).toBe(true);
    expect(guest.write("log", "y".repeat(LOG_RING_LAYOUT.maxLineChars + 1), 0)).toBe(false);
    expect(guest.write("log", "y".repeat(LOG_RING_LAYOUT.maxLineChars), 0)).toBe(true);
    expect(guest.write("trace", "t", 0)).toBe(false);
    expect(guest.write("log", "i", -1)).toBe(false);
    expect(read().map((l) => l.message.length)).toEqual([1000, LOG_RING_LAYOUT.maxLineChars]);
    // QuickJS's realm has no Atomics, Deno's runtime never attaches one: every line crosses.
    const none = createLogRing(undefined, LOG_RING_LAYOUT);
    none.attach(new SharedArrayBuffer(LOG_RING_LAYOUT.headerBytes + LOG_RING_LAYOUT.capacity * 2));
    expect(none.write("log", "a", 0)).toBe(false);
    expect(createLogRing(Atomics, LOG_RING_LAYOUT).write("log", "a", 0)).toBe(false);
  });

  it("leaves the lines after a sink that throws for the next read", () => {
    const { guest, host, read } = pair();
    for (const message of ["a", "b", "c"]) guest.write("log", message, 0);
    const seen: string[] = [];
    expect(() =>
      host.drain((_level, message) => {
        seen.push(message);
        if (message === "b") throw new Error("sink failed");
      }),
    ).toThrow("sink failed");
    expect(seen).toEqual(["a", "b"]);
    expect(read().map((l) => l.message)).toEqual(["c"]);
  });

  it("reads nothing more from a ring whose counts do not add up, and never loops on it", () => {
    // The guest's realm writes the memory: only the runtime's closure can, but the host checks anyway.
    const corruptions: [string, (ring: ReturnType<typeof pair>) => void][] = [
      ["written past the room", ({ ctl }) => Atomics.store(ctl, 0, ctl[1] + LOG_RING_LAYOUT.capacity + 8)],
      ["written behind the reader", ({ ctl }) => Atomics.store(ctl, 0, ctl[1] - 8)],
      ["a length past the line", ({ data }) => data.set([60_000], 1)],
      // Within what was written (2,075 units), past the longest line a guest may write.
      ["a length past the longest line", ({ data }) => data.set([2049, 0], 1)],
      ["an unknown level", ({ data }) => data.set([9], 0)],
    ];
    for (const [name, corrupt] of corruptions) {
      const ring = pair();
      ring.guest.write("log", "first", 0);
      ring.guest.write("log", "second", 0);
      ring.guest.write("log", "z".repeat(2040), 0);
      corrupt(ring);
      expect(ring.read(), name).toEqual([]);
      // Broken for good: later lines are not read either (the execution's crossed lines still are).
      ring.guest.write("log", "later", 0);
      expect(ring.read(), name).toEqual([]);
    }
  });
});
