import type { Writable } from "node:stream";
import { FrameLanes, type WaitingFrame } from "./frame-lanes.js";

/** The most bytes in the pipe's stream at once: the host sees a worker's reading in steps this size. */
const SLICE_BYTES = 1024 * 1024;

/**
 * One side's pipe to the other (the host's to a worker's stdin, a worker's stdout to the host),
 * fed a slice at a time. Handed whole, a burst of frames was one writev whose bytes all counted as
 * unread until the last of them was read: 40 prepares of 0.5–1 MB were "30 MB unread for over
 * 1000 ms" from a worker reading ~20 MB/s, and it was retired. Frames written in one tick still
 * leave in one write (a syscall per frame would cap throughput); past SLICE_BYTES they wait in
 * lanes (frame-lanes.ts), so a run that floods the pipe delays its own frames, not a neighbour's,
 * by more than a slice and a frame.
 */
export class PipeOut {
  private readonly waiting = new FrameLanes();
  private queued = 0;
  /** What is left of a frame handed in part: it goes on before any other. */
  private rest: WaitingFrame | undefined;
  private handed = 0;
  private corked = false;
  private ending = false;

  /** Callbacks of frames handed to the stream, in order: called once the stream has flushed `end` bytes. */
  private readonly readers: { end: number; onRead: () => void }[] = [];

  private stream: Writable | undefined;

  /** `onHanded`: a whole frame of `bytes` has been handed to the stream (it is garbage here now). */
  constructor(private readonly onHanded?: (bytes: number) => void) {}

  /**
   * The pipe's stream, once there is one (a worker the spawner process starts gets its pipes a
   * moment later): frames written before wait here.
   */
  attach(stream: Writable): void {
    this.stream = stream;
    stream.on("drain", () => this.feed());
    stream.on("close", () => {
      const dropped = this.waiting.drain();
      if (this.rest) dropped.unshift(this.rest);
      this.rest = undefined;
      this.queued = 0;
      this.flushedTo(Number.POSITIVE_INFINITY);
      for (const frame of dropped) frame.onRead?.();
    });
    this.feed();
  }

  /** Bytes written here that the other side has not read. */
  get unread(): number {
    return this.queued + (this.stream?.writableLength ?? 0);
  }

  /** Bytes the other side has read since it started. */
  get read(): number {
    return this.handed - (this.stream?.writableLength ?? 0);
  }

  /**
   * Write `frame` in `lane` (frame-lanes.ts: frames that must arrive in order share one;
   * undefined goes before every lane). `onRead`, when given, is called once the frame is out of
   * this process (handed to the pipe: the other side has read all of it but what the kernel's pipe
   * buffer holds), or dropped (the pipe closed). A host call's answer waits for it
   * (core/answer-gate.ts).
   */
  write(frame: Buffer, lane: number | undefined, onRead?: () => void): WaitingFrame | undefined {
    if (this.ending || this.stream?.destroyed) {
      onRead?.();
      return undefined;
    }
    const stream = this.stream;
    // The common case: nothing waits and the frame fits, so it goes straight to the stream.
    if (stream && this.queued === 0 && frame.length <= SLICE_BYTES - stream.writableLength) {
      this.hand(stream, frame, onRead, frame.length);
      return undefined;
    }
    const waiting: WaitingFrame = { bytes: frame, onRead };
    this.waiting.push(waiting, lane);
    this.queued += frame.length;
    this.feed();
    return waiting;
  }

  /**
   * Drop `frame` (what `write` returned) if no byte of it has been handed yet: true if so. Its
   * `onRead` is called, as for a frame dropped when the pipe closes.
   */
  withdraw(frame: WaitingFrame): boolean {
    if (!this.waiting.withdraw(frame)) return false;
    this.queued -= frame.bytes.length;
    frame.onRead?.();
    if (this.ending) this.feed();
    return true;
  }

  /** Close the pipe once what is queued has been handed to it. */
  end(): void {
    this.ending = true;
    this.feed();
  }

  private feed(): void {
    const stream = this.stream;
    if (!stream) return;
    let room = SLICE_BYTES - stream.writableLength;
    while (room > 0) {
      const frame = this.rest ?? this.waiting.shift();
      if (!frame) break;
      this.rest = undefined;
      const whole = frame.bytes.length <= room;
      const chunk = whole ? frame.bytes : frame.bytes.subarray(0, room);
      if (!whole)
        this.rest = { bytes: frame.bytes.subarray(room), onRead: frame.onRead, total: frame.total ?? frame.bytes.length };
      this.queued -= chunk.length;
      room -= chunk.length;
      if (whole) this.hand(stream, chunk, frame.onRead, frame.total ?? chunk.length);
      else this.hand(stream, chunk, undefined, 0);
    }
    if (this.ending && this.queued === 0 && !stream.writableEnded) stream.end();
  }

  /**
   * Hand `chunk` to the stream; `onRead` once it has flushed it. `frameBytes`: the whole frame's
   * length when this chunk ends one, else 0.
   */
  private hand(stream: Writable, chunk: Buffer, onRead: (() => void) | undefined, frameBytes: number): void {
    if (frameBytes > 0) this.onHanded?.(frameBytes);
    this.cork(stream);
    this.handed += chunk.length;
    if (onRead) this.readers.push({ end: this.handed, onRead });
    // A callback only while a frame waits on one (most writes have none: the hot path).
    if (this.readers.length === 0) stream.write(chunk);
    else {
      const handed = this.handed;
      stream.write(chunk, () => this.flushedTo(handed));
    }
  }

  private flushedTo(bytes: number): void {
    const readers = this.readers;
    let n = 0;
    while (n < readers.length && (readers[n] as { end: number }).end <= bytes) n++;
    if (n === 0) return;
    for (const reader of readers.splice(0, n)) reader.onRead();
  }

  /** Hand what this tick wrote to the pipe now, not when the tick ends. */
  uncork(): void {
    if (!this.corked) return;
    this.corked = false;
    this.stream?.uncork();
  }

  private cork(stream: Writable): void {
    if (this.corked) return;
    this.corked = true;
    stream.cork();
    process.nextTick(() => this.uncork());
  }
}
