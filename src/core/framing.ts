/**
 * Length-prefixed JSON frames over a byte stream (a pipe between processes): a 4-byte big-endian
 * length, then that many bytes of UTF-8 JSON. A frame that is too long, not JSON, or not an
 * object is a protocol error: the reader stops and the caller retires the peer.
 */
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

export class FrameReader {
  private buffered: Buffer[] = [];
  private size = 0;
  private failed = false;

  constructor(
    private readonly onMessage: (message: Record<string, unknown>) => void,
    private readonly onError: (reason: string) => void,
  ) {}

  push(chunk: Buffer): void {
    if (this.failed) return;
    this.buffered.push(chunk);
    this.size += chunk.length;
    while (this.size >= 4) {
      const head = this.take(4, false);
      const length = head.readUInt32BE(0);
      if (length > MAX_FRAME_BYTES) {
        this.fail(`a frame announced ${length} bytes, over the limit of ${MAX_FRAME_BYTES}`);
        return;
      }
      if (this.size < 4 + length) return;
      this.take(4, true);
      const body = this.take(length, true);
      let message: unknown;
      try {
        message = JSON.parse(body.toString("utf8"));
      } catch {
        this.fail("a frame was not JSON");
        return;
      }
      if (message === null || typeof message !== "object" || Array.isArray(message)) {
        this.fail("a frame was not an object");
        return;
      }
      this.onMessage(message as Record<string, unknown>);
      if (this.failed) return;
    }
  }

  private take(n: number, consume: boolean): Buffer {
    const all = this.buffered.length === 1 ? this.buffered[0] : Buffer.concat(this.buffered, this.size);
    const out = all.subarray(0, n);
    if (consume) {
      const rest = all.subarray(n);
      this.buffered = rest.length ? [rest] : [];
      this.size = rest.length;
    } else {
      this.buffered = [all];
    }
    return out;
  }

  private fail(reason: string): void {
    this.failed = true;
    this.buffered = [];
    this.size = 0;
    this.onError(reason);
  }
}
