import type { Writable } from "node:stream";

/** The most bytes in the pipe's stream at once: the host sees a worker's reading in steps this size. */
const SLICE_BYTES = 1024 * 1024;

/**
 * A worker's stdin, fed a slice at a time so the host can tell how fast the worker reads.
 * Handed whole, a burst of frames was one writev whose bytes all counted as unread until the
 * last of them was read: 40 prepares of 0.5–1 MB were "30 MB unread for over 1000 ms" from a
 * worker reading ~20 MB/s, and it was retired. Frames written in one tick still leave in one
 * write (a syscall per frame would cap throughput); past SLICE_BYTES they wait here.
 */
export class PipeOut {
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private handed = 0;
  private corked = false;
  private ending = false;

  /** Callbacks of frames written with one, in order of `end`: the byte count once they are read. */
  private readonly readers: { end: number; onRead: () => void }[] = [];

  private stdin: Writable | undefined;

  /**
   * The worker's stdin, once it has one (a worker the spawner process starts gets its pipes a
   * moment later): frames written before wait here.
   */
  attach(stdin: Writable): void {
    this.stdin = stdin;
    stdin.on("drain", () => this.feed());
    stdin.on("close", () => {
      this.queue.length = 0;
      this.queued = 0;
      this.flushedTo(Number.POSITIVE_INFINITY);
    });
    this.feed();
  }

  /** Bytes the host holds for the worker that it has not read. */
  get unread(): number {
    return this.queued + (this.stdin?.writableLength ?? 0);
  }

  /** Bytes the worker has read since it started. */
  get read(): number {
    return this.handed - (this.stdin?.writableLength ?? 0);
  }

  /**
   * `onRead`, when given, is called once the frame is out of this process (handed to the pipe:
   * the worker has read all of it but what the kernel's pipe buffer holds), or dropped (the pipe
   * closed). A host call's answer waits for it (core/answer-gate.ts).
   */
  write(frame: Buffer, onRead?: () => void): void {
    if (this.ending || this.stdin?.destroyed) {
      onRead?.();
      return;
    }
    this.queue.push(frame);
    this.queued += frame.length;
    if (onRead) this.readers.push({ end: this.handed + this.queued, onRead });
    this.feed();
  }

  private flushedTo(bytes: number): void {
    const readers = this.readers;
    let n = 0;
    while (n < readers.length && (readers[n] as { end: number }).end <= bytes) n++;
    if (n === 0) return;
    for (const reader of readers.splice(0, n)) reader.onRead();
  }

  /** Close the pipe once what is queued has been handed to it. */
  end(): void {
    this.ending = true;
    this.feed();
  }

  private feed(): void {
    const stdin = this.stdin;
    if (!stdin) return;
    let room = SLICE_BYTES - stdin.writableLength;
    while (room > 0 && this.queue.length > 0) {
      const head = this.queue[0] as Buffer;
      const chunk = head.length <= room ? head : head.subarray(0, room);
      if (chunk === head) this.queue.shift();
      else this.queue[0] = head.subarray(room);
      this.cork(stdin);
      this.queued -= chunk.length;
      this.handed += chunk.length;
      // A callback only while a frame waits on one (most writes have none: the hot path).
      if (this.readers.length === 0) stdin.write(chunk);
      else {
        const handed = this.handed;
        stdin.write(chunk, () => this.flushedTo(handed));
      }
      room -= chunk.length;
    }
    if (this.ending && this.queue.length === 0 && !stdin.writableEnded) stdin.end();
  }

  private cork(stdin: Writable): void {
    if (this.corked) return;
    this.corked = true;
    stdin.cork();
    process.nextTick(() => {
      this.corked = false;
      stdin.uncork();
    });
  }
}
