import { describe, expect, it } from "vitest";
import { encodeFrame, encodeJoinedTextFrame, encodeTextFrame, FrameReader } from "../../src/core/framing.js";

/** Feed `bytes` to a reader in chunks of `size` bytes; collect what it reads and why it stopped. */
function read(bytes: Buffer, size = bytes.length): { messages: Record<string, unknown>[]; error?: string } {
  const messages: Record<string, unknown>[] = [];
  let error: string | undefined;
  const reader = new FrameReader(
    (message) => messages.push(message),
    (reason) => {
      error = reason;
    },
  );
  for (let at = 0; at < bytes.length; at += size) reader.push(bytes.subarray(at, at + size));
  return { messages, error };
}

/** A frame with a hand-made text-tail body: [0x01][field index][header length][header][text]. */
function textFrame(field: number, header: string, text: string, headerLength = Buffer.byteLength(header)): Buffer {
  const body = Buffer.concat([Buffer.from([1, field]), Buffer.alloc(4), Buffer.from(header), Buffer.from(text)]);
  body.writeUInt32BE(headerLength, 2);
  const frame = Buffer.alloc(4);
  frame.writeUInt32BE(body.length, 0);
  return Buffer.concat([frame, body]);
}

describe("frames", () => {
  it("a text field travels after the header, intact, whatever the chunking", () => {
    const argsText = JSON.stringify([{ quote: 'say "hi"', umlaut: "ü", emoji: "😀 𝄞", big: "x".repeat(70_000) }]);
    const messages = [
      { t: "prefix-call", id: 1, path: "track", argsText, limits: { wallTimeMs: 5000 } },
      { t: "result", id: 1, resultText: ' {"status":"completed","ok":true,"value":3}' },
      { t: "bridge-result", cid: 7, ok: true, text: "" },
      { t: "stats", id: 0 },
    ];
    const sent = structuredClone(messages);
    const bytes = Buffer.concat(messages.map((m) => encodeTextFrame(m)));
    // The header is made with the text field set aside in place: the message is as it was.
    expect(messages).toEqual(sent);
    // The text is not escaped again inside the frame's JSON: it appears byte for byte.
    expect(bytes.includes(Buffer.from(argsText.slice(0, 60)))).toBe(true);
    expect(encodeFrame(messages[0]).includes(Buffer.from(argsText.slice(0, 60)))).toBe(false);
    for (const size of [bytes.length, 4096, 7, 1]) {
      const { messages: got, error } = read(bytes, size);
      expect(error).toBeUndefined();
      expect(got).toEqual(messages);
    }
  });

  it("text that UTF-8 cannot carry (a lone surrogate) stays inside the JSON, escaped", () => {
    const message = { t: "bridge-result", cid: 1, ok: true, text: '"\ud800 lone"' };
    const frame = encodeTextFrame(message);
    expect(frame[4]).toBe("{".charCodeAt(0));
    expect(read(frame).messages).toEqual([message]);
  });

  it("texts written into a frame one by one read back as the frame of their join, byte for byte", () => {
    const texts = [' [{"a":"ü 😀"}]', "", ` ["${"x".repeat(40_000)}"]`, ' ["say \\"hi\\""]'];
    const header = { t: "prefix-calls", ids: [1, 2, 3, 4], prefix: 7, path: "batch" };
    const joined = encodeJoinedTextFrame(header, "argsText", texts);
    expect(joined.equals(encodeTextFrame({ ...header, argsText: texts.join("\u0001") }))).toBe(true);
    for (const size of [joined.length, 4096, 3]) {
      expect(read(joined, size)).toEqual({ messages: [{ ...header, argsText: texts.join("\u0001") }] });
    }
    // A text UTF-8 cannot carry: joined, inside the JSON, as encodeTextFrame would have it.
    const lone = [" [1]", '"\ud800"'];
    const frame = encodeJoinedTextFrame(header, "argsText", lone);
    expect(frame[4]).toBe("{".charCodeAt(0));
    expect(read(frame).messages).toEqual([{ ...header, argsText: lone.join("\u0001") }]);
    // Past the frame limit it throws before anything is made, as encodeTextFrame does.
    const huge = "x".repeat(32 * 1024 * 1024);
    expect(() => encodeJoinedTextFrame(header, "argsText", [huge, huge, "y"])).toThrow(RangeError);
  });

  it("JSON frames and text frames mix on one stream", () => {
    const a = { t: "ready", pid: 1 };
    const b = { t: "result", id: 2, resultText: "x" };
    expect(read(Buffer.concat([encodeFrame(a), encodeTextFrame(b), encodeFrame(a)])).messages).toEqual([a, b, a]);
  });

  it("a malformed text frame is a protocol error, never a message", () => {
    const cases: [Buffer, RegExp][] = [
      [textFrame(1, '{"t":"result"}', "x", 10_000), /header did not fit/],
      [textFrame(9, '{"t":"result"}', "x"), /named no text field/],
      [textFrame(255, '{"t":"result"}', '{"polluted":true}'), /named no text field/],
      [Buffer.from([0, 0, 0, 3, 1, 1, 0]), /named no text field/],
      [textFrame(1, "not json", "x"), /not JSON/],
      [textFrame(1, '["result"]', "x"), /not an object/],
    ];
    for (const [frame, reason] of cases) {
      const { messages, error } = read(frame);
      expect(messages).toEqual([]);
      expect(error).toMatch(reason);
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("the text tail wins over a field of the same name in the header", () => {
    const { messages, error } = read(textFrame(1, '{"t":"result","id":1,"resultText":{"$":"x"}}', "tail"));
    expect(error).toBeUndefined();
    expect(messages).toEqual([{ t: "result", id: 1, resultText: "tail" }]);
  });

  it("reads a 48 MB frame that arrives in 64 KB chunks in linear time, and frames split anywhere", () => {
    const text = "中".repeat(16_000_000);
    const frame = encodeTextFrame({ t: "value", id: 1, valueText: text });
    const started = performance.now();
    const { messages, error } = read(Buffer.concat([frame, encodeFrame({ t: "after" })]), 64 * 1024);
    // Joining every buffered chunk on each new one took 7.2 s for this frame here.
    expect(performance.now() - started).toBeLessThan(2500);
    expect(error).toBeUndefined();
    expect(messages.length).toBe(2);
    expect((messages[0].valueText as string).length).toBe(16_000_000);
    expect(messages[1]).toEqual({ t: "after" });
    // A header and a body split byte by byte, and an empty frame (not JSON: a protocol error).
    const small = Buffer.concat([encodeFrame({ t: "a" }), encodeTextFrame({ t: "b", argsText: "x" })]);
    expect(read(small, 1).messages).toEqual([{ t: "a" }, { t: "b", argsText: "x" }]);
    expect(read(Buffer.alloc(4), 1).error).toBe("a frame was not JSON");
  });
});

describe("a frame's JSON is weighed before it is parsed", () => {
  // why: a frame's JSON is parsed on the host's thread; a worker a guest took over could send
  // 64 MiB of `[{},…]` (21 M objects: seconds of that thread, gigabytes of its heap).
  it("more than a million objects and arrays is a protocol error; a million is read", () => {
    const frameOf = (n: number) => encodeFrame({ t: "stats", id: 0, x: Array(n - 2).fill({}) });
    expect(read(frameOf(1_000_000)).messages[0]?.x).toHaveLength(999_998);
    const { messages, error } = read(frameOf(1_000_001));
    expect(messages).toEqual([]);
    expect(error).toMatch(/^a frame: more than 1000000 objects and arrays/);
    // In a text frame's header too; the text tail is a string, not weighed.
    const header = JSON.stringify({ t: "result", id: 1, x: Array(1_000_000).fill({}) });
    expect(read(textFrame(0, header, "")).error).toMatch(/^a frame: more than 1000000/);
    const tail = JSON.stringify(Array(2_000_000).fill({}));
    expect(read(encodeTextFrame({ t: "result", id: 1, resultText: tail })).messages[0]?.resultText).toBe(tail);
  });
});
