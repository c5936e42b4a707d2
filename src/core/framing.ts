/**
 * Length-prefixed JSON frames over a byte stream (a pipe between processes): a 4-byte big-endian
 * length, then that many bytes of UTF-8 JSON. A frame that is too long, not JSON, or not an
 * object is a protocol error: the reader stops and the caller retires the peer.
 */
import { sharedCodec } from "./bindings.js";
import { joinTexts, TEXT_SEPARATOR } from "./joined-texts.js";

export const MAX_FRAME_BYTES = 64 * 1024 * 1024;

export function encodeFrame(message: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(message), "utf8");
  if (body.length > MAX_FRAME_BYTES)
    throw new RangeError(`a frame of ${body.length} bytes is over the limit of ${MAX_FRAME_BYTES}`);
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, 4);
  return frame;
}

/**
 * A frame whose body starts with this byte carries one text field after its JSON header, as
 * UTF-8 of its own: `[0x01][field][4-byte header length][header JSON][text]`, `field` the index
 * of the field's name in TEXT_FIELDS. Encoded arguments and results are JSON already; inside a
 * JSON frame every quote in them is escaped and unescaped again (a ~770-byte event: 3.3 µs to
 * frame, 2.0 µs to read; this way 1.6 and 1.2 µs; a 25 KB batch 51 → 8 and 31 → 5 µs).
 */
const TEXT_TAIL = 0x01;
/** The fields that may travel as a text tail. */
export const TEXT_FIELDS: readonly string[] = ["argsText", "resultText", "text", "valueText"];

/**
 * `encodeFrame`, with the first string field named in TEXT_FIELDS sent as a text tail. Only for
 * peers that read text frames: FrameReader (the process host and its workers), and the deno
 * engine's bootstrap (its own reader, given TEXT_FIELDS in its config).
 * The header is `message` stringified with that field set to undefined (JSON leaves it out) and
 * then restored: a copy of the message without it cost more than the rest of the header.
 */
export function encodeTextFrame(message: object): Buffer {
  const fields = message as Record<string, unknown>;
  let index = 0;
  while (index < TEXT_FIELDS.length && typeof fields[TEXT_FIELDS[index]] !== "string") index++;
  if (index === TEXT_FIELDS.length) return encodeFrame(message);
  const field = TEXT_FIELDS[index];
  const text = fields[field] as string;
  // A lone surrogate would not survive UTF-8: such text stays inside the JSON, escaped.
  if (!isWellFormed(text)) return encodeFrame(message);
  let header: string;
  fields[field] = undefined;
  try {
    header = JSON.stringify(message);
  } finally {
    fields[field] = text;
  }
  return textFrame(header, index, [text]);
}

/**
 * `encodeTextFrame` of `header` with `field` set to `texts` joined by TEXT_SEPARATOR, each text
 * written into the frame where it goes instead of joined first: the join was a copy of every
 * batch of calls, and under load a string in fresh pages (the frame's text still arrives as one
 * string). Falls back to joining when a text would not survive UTF-8.
 */
export function encodeJoinedTextFrame(header: object, field: "argsText" | "valueText", texts: readonly string[]): Buffer {
  if (!texts.every(isWellFormed)) return encodeTextFrame({ ...header, [field]: joinTexts(texts) });
  return textFrame(JSON.stringify(header), TEXT_FIELDS.indexOf(field), texts);
}

/**
 * A text frame: `[0x01][field index][header length][header][texts joined by TEXT_SEPARATOR]`,
 * each text written in place. Throws a RangeError past MAX_FRAME_BYTES, before anything is made.
 */
function textFrame(header: string, index: number, texts: readonly string[]): Buffer {
  const headerBytes = Buffer.byteLength(header);
  let textBytes = texts.length - 1;
  for (const text of texts) textBytes += Buffer.byteLength(text);
  const length = 2 + 4 + headerBytes + textBytes;
  if (length > MAX_FRAME_BYTES) throw new RangeError(`a frame of ${length} bytes is over the limit of ${MAX_FRAME_BYTES}`);
  const frame = Buffer.allocUnsafe(4 + length);
  frame.writeUInt32BE(length, 0);
  frame[4] = TEXT_TAIL;
  frame[5] = index;
  frame.writeUInt32BE(headerBytes, 6);
  let at = 10 + frame.write(header, 10, "utf8");
  for (let i = 0; i < texts.length; i++) {
    if (i > 0) frame[at++] = SEPARATOR_BYTE;
    at += frame.write(texts[i], at, "utf8");
  }
  return frame;
}

const SEPARATOR_BYTE = TEXT_SEPARATOR.charCodeAt(0);

/** String.prototype.isWellFormed (Node 20 has it; the TypeScript lib cordon targets does not name it). */
function isWellFormed(text: string): boolean {
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}

export class FrameReader {
  private buffered: Buffer[] = [];
  private size = 0;
  /** The length the frame being read announced, once its 4-byte header is in. */
  private expected: number | undefined;
  private failed = false;

  constructor(
    /** `bytes`: the frame's length, for peers that bound what each kind of frame may carry. */
    private readonly onMessage: (message: Record<string, unknown>, bytes: number) => void,
    private readonly onError: (reason: string) => void,
  ) {}

  /**
   * Chunks are kept as they come until a whole frame is in: a large frame arrives in many 64 KB
   * chunks, and joining them on each one made reading it quadratic (48 MB: seconds of the
   * host's CPU, and a worker taken for hung meanwhile).
   */
  push(chunk: Buffer): void {
    if (this.failed) return;
    this.buffered.push(chunk);
    this.size += chunk.length;
    for (;;) {
      if (this.expected === undefined) {
        if (this.size < 4) return;
        const length = this.take(4).readUInt32BE(0);
        if (length > MAX_FRAME_BYTES) {
          this.fail(`a frame announced ${length} bytes, over the limit of ${MAX_FRAME_BYTES}`);
          return;
        }
        this.expected = length;
      }
      if (this.size < this.expected) return;
      const body = this.take(this.expected);
      this.expected = undefined;
      const message = body[0] === TEXT_TAIL ? this.readTextFrame(body) : this.readJson(body.toString("utf8"));
      if (message === undefined) return;
      this.onMessage(message, body.length);
      if (this.failed) return;
    }
  }

  private readJson(text: string): Record<string, unknown> | undefined {
    // Weighed before JSON.parse builds it (codec-containers.ts): a frame's JSON holds a few
    // fields (values travel as text), and a worker a guest took over could send 64 MiB of
    // `[{},…]`, 21 M objects, seconds of the host's thread and gigabytes of its heap.
    try {
      sharedCodec().weigh(text, "a frame");
    } catch (error) {
      this.fail((error as Error).message);
      return undefined;
    }
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      this.fail("a frame was not JSON");
      return undefined;
    }
    if (message === null || typeof message !== "object" || Array.isArray(message)) {
      this.fail("a frame was not an object");
      return undefined;
    }
    return message as Record<string, unknown>;
  }

  private readTextFrame(body: Buffer): Record<string, unknown> | undefined {
    const field = body.length >= 6 ? TEXT_FIELDS[body[1]] : undefined;
    if (field === undefined) {
      this.fail("a text frame named no text field");
      return undefined;
    }
    const headerBytes = body.readUInt32BE(2);
    if (6 + headerBytes > body.length) {
      this.fail("a text frame's header did not fit in it");
      return undefined;
    }
    const message = this.readJson(body.toString("utf8", 6, 6 + headerBytes));
    if (message === undefined) return undefined;
    message[field] = body.toString("utf8", 6 + headerBytes);
    return message;
  }

  /** Remove and return the first `n` buffered bytes (`n` <= size). */
  private take(n: number): Buffer {
    if (n === 0) return Buffer.alloc(0);
    const first = this.buffered[0];
    if (first.length >= n) {
      // Within the first chunk (the usual case: many small frames per chunk): no copy.
      if (first.length === n) this.buffered.shift();
      else this.buffered[0] = first.subarray(n);
      this.size -= n;
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const head = this.buffered[0];
      const part = Math.min(head.length, n - filled);
      head.copy(out, filled, 0, part);
      filled += part;
      if (part === head.length) this.buffered.shift();
      else this.buffered[0] = head.subarray(part);
    }
    this.size -= n;
    return out;
  }

  private fail(reason: string): void {
    this.failed = true;
    this.buffered = [];
    this.size = 0;
    this.expected = undefined;
    this.onError(reason);
  }
}
