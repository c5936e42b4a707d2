import { once } from "node:events";
import { connect, createServer, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { encodeFrame, FrameReader } from "../../src/core/framing.js";
import { FrameLanes } from "../../src/hosts/process/frame-lanes.js";
import { PipeOut } from "../../src/hosts/process/pipe-out.js";

const frame = (name: string) => ({ bytes: Buffer.from(name) });
const names = (lanes: FrameLanes) => {
  const out: string[] = [];
  for (let next = lanes.shift(); next; next = lanes.shift()) out.push(next.bytes.toString());
  return out;
};

describe("frames waiting for a pipe (FrameLanes)", () => {
  it("keeps each lane's order and lets the lanes take turns a frame at a time", () => {
    const lanes = new FrameLanes();
    for (let i = 1; i <= 4; i++) lanes.push(frame(`a${i}`), 1);
    lanes.push(frame("b1"), 2);
    lanes.push(frame("c1"), 3);
    lanes.push(frame("b2"), 2);
    expect(lanes.size).toBe(7);
    expect(names(lanes)).toEqual(["a1", "b1", "c1", "a2", "b2", "a3", "a4"]);
    expect(lanes.size).toBe(0);
    expect(lanes.shift()).toBeUndefined();
  });

  it("sends frames without a lane before every lane's", () => {
    const lanes = new FrameLanes();
    lanes.push(frame("a1"), 1);
    lanes.push(frame("a2"), 1);
    expect(lanes.shift()?.bytes.toString()).toBe("a1");
    lanes.push(frame("stats"), undefined);
    lanes.push(frame("b1"), 2);
    expect(names(lanes)).toEqual(["stats", "a2", "b1"]);
  });

  it("skips a withdrawn frame, and withdraws only what still waits", () => {
    const lanes = new FrameLanes();
    const a1 = frame("a1");
    const a2 = frame("a2");
    lanes.push(a1, 1);
    lanes.push(a2, 1);
    lanes.push(frame("b1"), 2);
    expect(lanes.withdraw(a2)).toBe(true);
    expect(lanes.withdraw(a2)).toBe(false);
    expect(lanes.size).toBe(2);
    expect(lanes.shift()).toBe(a1);
    expect(lanes.withdraw(a1)).toBe(false);
    expect(names(lanes)).toEqual(["b1"]);
    const only = frame("x");
    lanes.push(only, 3);
    lanes.withdraw(only);
    expect(lanes.shift()).toBeUndefined();
    expect(lanes.drain()).toEqual([]);
  });

  it("gives up every frame when the pipe closes", () => {
    const lanes = new FrameLanes();
    lanes.push(frame("a1"), 1);
    lanes.push(frame("x"), undefined);
    lanes.push(frame("b1"), 2);
    expect(
      lanes
        .drain()
        .map((f) => f.bytes.toString())
        .sort(),
    ).toEqual(["a1", "b1", "x"]);
    expect(lanes.size).toBe(0);
    expect(lanes.shift()).toBeUndefined();
  });
});

describe("a pipe a flooding run shares (PipeOut over a real socket)", () => {
  const closers: (() => void)[] = [];
  afterEach(() => {
    for (const close of closers.splice(0)) close();
  });

  /** A connected pair on 127.0.0.1: `out` writes into `writer`, the test reads `reader` when it chooses. */
  async function socketPair(): Promise<{ writer: Socket; reader: Socket }> {
    const server = createServer();
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const { port } = server.address() as { port: number };
    const accepted = once(server, "connection");
    const writer = connect(port, "127.0.0.1");
    await once(writer, "connect");
    const [reader] = (await accepted) as [Socket];
    reader.pause();
    closers.push(() => {
      writer.destroy();
      reader.destroy();
      server.close();
    });
    return { writer, reader };
  }

  /** Read frames off `reader` until `until` is seen; returns their names and the bytes read before it. */
  async function readUntil(reader: Socket, until: string): Promise<{ order: string[]; bytesBefore: number }> {
    const order: string[] = [];
    let bytes = 0;
    let bytesBefore = -1;
    await new Promise<void>((resolve, reject) => {
      const frames = new FrameReader(
        (message, length) => {
          const name = String(message.name);
          order.push(name);
          if (name === until && bytesBefore < 0) {
            bytesBefore = bytes;
            resolve();
          }
          bytes += length + 4;
        },
        (reason) => reject(new Error(reason)),
      );
      reader.on("data", (chunk: Buffer) => frames.push(chunk));
      reader.resume();
    });
    return { order, bytesBefore };
  }

  it("hands a neighbour's small frame after at most a slice and a frame of a 40 MB backlog", async () => {
    const { writer, reader } = await socketPair();
    const out = new PipeOut();
    out.attach(writer);
    const big = "a".repeat(1024 * 1024);
    for (let i = 0; i < 40; i++) out.write(encodeFrame({ name: `flood${i}`, big }), 1);
    expect(out.unread).toBeGreaterThan(30 * 1024 * 1024);
    let read = false;
    out.write(encodeFrame({ name: "neighbour" }), 2, () => {
      read = true;
    });
    const { order, bytesBefore } = await readUntil(reader, "neighbour");
    // Before lanes it came after all 40 MB.
    expect(bytesBefore).toBeLessThan(4 * 1024 * 1024);
    expect(order.indexOf("neighbour")).toBeLessThan(4);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(read).toBe(true);
  });

  it("keeps one lane's frames in order, large and small, whatever the other lanes write", async () => {
    const { writer, reader } = await socketPair();
    const out = new PipeOut();
    out.attach(writer);
    const big = "b".repeat(700 * 1024);
    const expected: string[] = [];
    for (let i = 0; i < 12; i++) {
      const name = `one${i}`;
      expected.push(name);
      out.write(encodeFrame(i % 3 === 0 ? { name, big } : { name }), 1);
      out.write(encodeFrame({ name: `two${i}`, big }), 2);
    }
    out.write(encodeFrame({ name: "end" }), 1);
    const { order } = await readUntil(reader, "end");
    expect(order.filter((name) => name.startsWith("one"))).toEqual(expected);
    expect(order.filter((name) => name.startsWith("two"))).toEqual(
      Array.from({ length: order.filter((n) => n.startsWith("two")).length }, (_, i) => `two${i}`),
    );
  });

  it("never sends a withdrawn frame, and calls its onRead", async () => {
    const { writer, reader } = await socketPair();
    const out = new PipeOut();
    out.attach(writer);
    const big = "d".repeat(1024 * 1024);
    const handed = out.write(encodeFrame({ name: "first", big }), 1);
    const waiting = [];
    for (let i = 0; i < 6; i++) waiting.push(out.write(encodeFrame({ name: `gone${i}`, big }), 1));
    let read = 0;
    const last = out.write(encodeFrame({ name: "kept" }), 1, () => read++);
    for (const frame of waiting) expect(frame && out.withdraw(frame)).toBe(true);
    expect(handed === undefined || !out.withdraw(handed)).toBe(true);
    out.write(encodeFrame({ name: "end" }), 1);
    const { order } = await readUntil(reader, "end");
    expect(order).toEqual(["first", "kept", "end"]);
    expect(last && out.withdraw(last)).toBe(false);
    expect(read).toBe(1);
  });

  it("calls back every frame's onRead once, handed or dropped when the pipe closes", async () => {
    const { writer } = await socketPair();
    const out = new PipeOut();
    out.attach(writer);
    const big = "c".repeat(1024 * 1024);
    let called = 0;
    for (let i = 0; i < 8; i++) out.write(encodeFrame({ name: `f${i}`, big }), i % 2, () => called++);
    writer.destroy();
    await once(writer, "close");
    expect(called).toBe(8);
    out.write(encodeFrame({ name: "late" }), 0, () => called++);
    expect(called).toBe(9);
  });
});
