import { describe, expect, it } from "vitest";
import { createOutbox, OUTBOX_LAYOUT } from "../../src/engines/guest/outbox.js";
import { Outbox } from "../../src/engines/v8/outbox.js";

type Entry = { level: string; message: string; index: number; epochMs: number };

/** The two sides of the outbox (v8's console lines and timer changes without a crossing), in this thread. */
function pair() {
  const host = new Outbox();
  const guest = createOutbox(Atomics, OUTBOX_LAYOUT, host.memory);
  const read = () => {
    const entries: Entry[] = [];
    host.drain({
      log: (level, message, index, epochMs) => entries.push({ level, message, index, epochMs }),
      // Timers read as entries of their own: level "timer", the delay as message, the id as index.
      timer: (id, ms, epochMs) => entries.push({ level: "timer", message: String(ms), index: id, epochMs }),
    });
    return entries;
  };
  const ctl = new Int32Array(host.memory, 0, OUTBOX_LAYOUT.headerBytes / 4);
  const data = new Uint16Array(host.memory, OUTBOX_LAYOUT.headerBytes, OUTBOX_LAYOUT.capacity);
  return { host, guest, read, ctl, data };
}

describe("outbox", () => {
  it("hands lines over in order with their level, call index and time, across many wraps", () => {
    const { guest, read } = pair();
    const levels = OUTBOX_LAYOUT.levels;
    const sent: { level: string; message: string; index: number }[] = [];
    const got: ReturnType<typeof read> = [];
    const before = Date.now();
    // Lines of every length up to the longest, 4,000 in all: ~200 times the ring's room. The
    // odd lengths put entries (and a surrogate pair: "😀") across the end of the memory.
    for (let i = 0; i < 4000; i++) {
      const line = { level: levels[i % 5], message: `${i}:${"😀a".repeat((i * 37) % 600)}`, index: (i * 7919) % 70_000 };
      if (!guest.log(line.level, line.message, line.index)) {
        got.push(...read());
        expect(guest.log(line.level, line.message, line.index)).toBe(true);
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
    while (guest.log("log", line, 0)) written++;
    // 8 units of header a line: 8,192 / 1,008.
    expect(written).toBe(8);
    expect(read()).toHaveLength(8);
    expect(guest.log("log", line, 0)).toBe(true);
    expect(guest.log("log", "y".repeat(OUTBOX_LAYOUT.maxLineChars + 1), 0)).toBe(false);
    expect(guest.log("log", "y".repeat(OUTBOX_LAYOUT.maxLineChars), 0)).toBe(true);
    expect(guest.log("trace", "t", 0)).toBe(false);
    expect(guest.log("log", "i", -1)).toBe(false);
    expect(read().map((l) => l.message.length)).toEqual([1000, OUTBOX_LAYOUT.maxLineChars]);
    // QuickJS's realm has no Atomics, and no engine but v8 hands over memory: every line crosses.
    const memory = new SharedArrayBuffer(OUTBOX_LAYOUT.headerBytes + OUTBOX_LAYOUT.capacity * 2);
    expect(createOutbox(undefined, OUTBOX_LAYOUT, memory).log("log", "a", 0)).toBe(false);
    expect(createOutbox(Atomics, OUTBOX_LAYOUT, undefined).log("log", "a", 0)).toBe(false);
    expect(createOutbox(Atomics, OUTBOX_LAYOUT, undefined).timer(1, 5)).toBe(false);
  });

  it("carries timer changes in order with the lines around them", () => {
    const { guest, read } = pair();
    const before = Date.now();
    expect(guest.log("log", "set two", 0)).toBe(true);
    expect(guest.timer(1, 0)).toBe(true);
    expect(guest.timer(0xffffffff, 2147483647)).toBe(true);
    expect(guest.log("warn", "clear one", 3)).toBe(true);
    expect(guest.timer(1, -1)).toBe(true);
    expect(guest.timer(7, 12.7)).toBe(true);
    // What the host could not read as a timer change crosses instead.
    expect(guest.timer(2 ** 32, 5)).toBe(false);
    expect(guest.timer(-1, 5)).toBe(false);
    expect(guest.timer(8, Number.NaN)).toBe(false);
    expect(guest.timer(8, 2 ** 32)).toBe(false);
    const entries = read();
    expect(entries.map(({ level, message, index }) => [level, message, index])).toEqual([
      ["log", "set two", 0],
      ["timer", "0", 1],
      ["timer", "2147483647", 0xffffffff],
      ["warn", "clear one", 3],
      ["timer", "-1", 1],
      ["timer", "12", 7],
    ]);
    for (const entry of entries) expect(entry.epochMs).toBeGreaterThanOrEqual(before);
    // 8 units each: a full outbox refuses timers too.
    while (guest.timer(9, 1));
    expect(read()).toHaveLength(OUTBOX_LAYOUT.capacity / OUTBOX_LAYOUT.entryHeader);
  });

  it("leaves the lines after a sink that throws for the next read", () => {
    const { guest, host, read } = pair();
    for (const message of ["a", "b", "c"]) guest.log("log", message, 0);
    const seen: string[] = [];
    const throwing = {
      log: (_level: string, message: string) => {
        seen.push(message);
        if (message === "b") throw new Error("sink failed");
      },
      timer: () => {},
    };
    expect(() => host.drain(throwing)).toThrow("sink failed");
    expect(seen).toEqual(["a", "b"]);
    expect(read().map((l) => l.message)).toEqual(["c"]);
  });

  it("reads nothing more from a ring whose counts do not add up, and never loops on it", () => {
    // The guest's realm writes the memory: only the runtime's closure can, but the host checks anyway.
    const corruptions: [string, (ring: ReturnType<typeof pair>) => void][] = [
      ["written past the room", ({ ctl }) => Atomics.store(ctl, 0, ctl[1] + OUTBOX_LAYOUT.capacity + 8)],
      ["written behind the reader", ({ ctl }) => Atomics.store(ctl, 0, ctl[1] - 8)],
      ["a length past the line", ({ data }) => data.set([60_000], 1)],
      // Within what was written (2,075 units), past the longest line a guest may write.
      ["a length past the longest line", ({ data }) => data.set([2049, 0], 1)],
      ["an unknown level", ({ data }) => data.set([9], 0)],
      // A timer change (kind 5) whose delay is past setTimeout's bound and is not "cleared".
      ["a timer's delay past its bound", ({ data }) => data.set([5, 0, 0x8000], 0)],
    ];
    for (const [name, corrupt] of corruptions) {
      const ring = pair();
      ring.guest.log("log", "first", 0);
      ring.guest.log("log", "second", 0);
      ring.guest.log("log", "z".repeat(2040), 0);
      corrupt(ring);
      expect(ring.read(), name).toEqual([]);
      // Broken for good: later lines are not read either (the execution's crossed lines still are).
      ring.guest.log("log", "later", 0);
      expect(ring.read(), name).toEqual([]);
    }
  });
});
