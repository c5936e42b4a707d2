import type { CallChannel } from "./channel.js";

/** How often a serving task that has served calls is looked at until it ends (see `LeftoverWatch`). */
export const LEFTOVER_CHECK_MS = 10;
/** How long a serving task must have been seen ending before its instance counts as stalled. */
export const LEFTOVER_STALL_MS = 100;

/** What the watch reads of its instance, and how it ends one whose leftover ran too long. */
export interface LeftoverOwner {
  channel(): CallChannel | undefined;
  gone(): boolean;
  /** The leftover ran past the last served call's wall time: discard the instance. */
  overran(): void;
}

/**
 * A served call's answer is out before what it left queued has run (a chain a synchronous export
 * did not await): that runs when the serving task ends, after the call and outside its limits.
 * This watches the task seen ending with it, since when, and for how long it may run (the wall
 * time of the last call served); past that the owner is told (`overran`). Meanwhile the instance
 * counts as stalled, so no other call is handed it (and charged for the leftover's time).
 */
export class LeftoverWatch {
  private leftover: { task: Promise<unknown>; since: number } | undefined;
  private limitMs = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly owner: LeftoverOwner) {}

  /** Look at the serving task until it ends, for the leftover of a call served now that may run `ms`. */
  watch(ms: number): void {
    this.limitMs = ms;
    if (this.timer !== undefined) return;
    this.timer = setTimeout(this.check, LEFTOVER_CHECK_MS);
    this.timer.unref();
  }

  /**
   * The serving task has been running what served calls left queued for a while. Not at once: a
   * task that ends normally is seen ending now and then (its thread waiting for a core on a loaded
   * machine), and a call then handed another instance made a second one, after which no call was
   * served (V8Instance.alone).
   */
  stalled(): boolean {
    const leftover = this.leftover;
    return (
      leftover !== undefined &&
      performance.now() - leftover.since >= LEFTOVER_STALL_MS &&
      this.owner.channel()?.endingTask === leftover.task
    );
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private readonly check = (): void => {
    this.timer = undefined;
    const channel = this.owner.channel();
    if (!channel?.serving || this.owner.gone()) {
      this.leftover = undefined;
      return;
    }
    const ending = channel.endingTask;
    const now = performance.now();
    if (ending === undefined) this.leftover = undefined;
    else if (this.leftover?.task !== ending) this.leftover = { task: ending, since: now };
    else if (now - this.leftover.since >= this.limitMs) {
      this.owner.overran();
      return;
    }
    this.timer = setTimeout(this.check, LEFTOVER_CHECK_MS);
    this.timer.unref();
  };
}
