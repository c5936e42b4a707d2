/** A frame waiting for its pipe, and what to call once it is out of this process (pipe-out.ts). */
export interface WaitingFrame {
  bytes: Buffer;
  onRead?: (() => void) | undefined;
  /** The whole frame's length, when `bytes` is what is left of it. */
  total?: number;
  /** Set while it waits in a lane; cleared when taken or withdrawn. */
  waiting?: boolean;
}

/**
 * The frames waiting for one pipe while it is backed up, in lanes, so that one run's flood does
 * not hold up another's frames: a shared worker's 6 MB of one guest's host-call arguments sat in
 * front of a neighbour's 100 ms run's answer, which reached its caller ~1 s late (red team: up to
 * 3 s with two floods).
 *
 * A lane is a number the writer picks: frames that must arrive in order share one (a run's host
 * calls before its answer, a call before its abort, a prefix's calls before its dispose). The
 * lanes take turns a frame at a time, oldest lane first; frames with no lane (`undefined`: control
 * frames no other frame needs to precede, such as stats) go before every lane.
 */
export class FrameLanes {
  private readonly first: WaitingFrame[] = [];
  /** By lane, in turn order: a lane that sends a frame and still has some goes to the back. */
  private readonly lanes = new Map<number, WaitingFrame[]>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  push(frame: WaitingFrame, lane: number | undefined): void {
    this.count++;
    frame.waiting = true;
    if (lane === undefined) {
      this.first.push(frame);
      return;
    }
    const queue = this.lanes.get(lane);
    if (queue) queue.push(frame);
    else this.lanes.set(lane, [frame]);
  }

  /** The next frame to send, or undefined when none waits. */
  shift(): WaitingFrame | undefined {
    while (this.count > 0) {
      const frame = this.next();
      if (!frame) break;
      if (!frame.waiting) continue; // withdrawn: already left the count
      frame.waiting = false;
      this.count--;
      return frame;
    }
    // Only withdrawn frames were left (or none): nothing waits.
    this.first.length = 0;
    this.lanes.clear();
    return undefined;
  }

  /**
   * Take `frame` out before it is sent: true if it was still waiting. It stays in its lane's
   * array, skipped when its turn comes (a lane can hold thousands: no search).
   */
  withdraw(frame: WaitingFrame): boolean {
    if (!frame.waiting) return false;
    frame.waiting = false;
    this.count--;
    return true;
  }

  private next(): WaitingFrame | undefined {
    if (this.first.length > 0) return this.first.shift();
    for (const [lane, queue] of this.lanes) {
      const frame = queue.shift();
      this.lanes.delete(lane);
      if (queue.length > 0) this.lanes.set(lane, queue);
      return frame;
    }
    return undefined;
  }

  /** Every frame still waiting, emptied (the pipe closed). */
  drain(): WaitingFrame[] {
    const all = this.first.filter((frame) => frame.waiting);
    for (const queue of this.lanes.values()) for (const frame of queue) if (frame.waiting) all.push(frame);
    for (const frame of all) frame.waiting = false;
    this.first.length = 0;
    this.lanes.clear();
    this.count = 0;
    return all;
  }
}
