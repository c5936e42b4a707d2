import { MAX_PENDING_TIMERS, MAX_TIMER_MS } from "../core/limits.js";

interface Armed {
  id: number;
  /** Date.now() when it is due. */
  deadline: number;
  /** Arming order: ties go to the timer set first. */
  seq: number;
  handle: NodeJS.Timeout;
}

/**
 * An execution's host timers for the guest's `setTimeout`/`setInterval`, fired in the order the
 * guest may rely on: by when each is due, ties in the order they were set.
 *
 * A timer reaches the host when it is set (a crossing) or later (v8's outbox, read as the
 * guest's task ends): it is then due `ms` after `setAt`, the moment the guest set it, and Node is
 * given what is left. Node keeps one list per delay and fires lists due at the same millisecond
 * in no order of the guest's, so timers set together but read a millisecond apart could swap
 * (measured: 900 timers of three delays, out of order in 1 run of ~18). When a host timer fires,
 * every timer due before it (or with it, set first) fires first, in order.
 */
export class GuestTimers {
  private readonly armed = new Map<number, Armed>();
  private seq = 0;

  constructor(
    /** Fire the guest's timer `id` (its callback runs in the guest). */
    private readonly fire: (id: number) => void,
  ) {}

  /** Set timer `id` to come due `ms` after `setAt` (default now); `ms` below 0 clears it. */
  set(id: number, ms: number, setAt = Date.now()): void {
    this.clear(id);
    // Past the limit the guest's runtime has already refused it; a forged frame (Deno) is ignored.
    if (!(ms >= 0) || this.armed.size >= MAX_PENDING_TIMERS) return;
    const deadline = setAt + Math.min(ms, MAX_TIMER_MS);
    const delay = Math.min(Math.max(0, deadline - Date.now()), MAX_TIMER_MS);
    const timer: Armed = { id, deadline, seq: ++this.seq, handle: setTimeout(() => this.due(timer), delay) };
    this.armed.set(id, timer);
  }

  clear(id: number): void {
    const timer = this.armed.get(id);
    if (!timer) return;
    clearTimeout(timer.handle);
    this.armed.delete(id);
  }

  clearAll(): void {
    for (const timer of this.armed.values()) clearTimeout(timer.handle);
    this.armed.clear();
  }

  /** `trigger` fired: it and every timer due before it (or with it, set first) fire, in order. */
  private due(trigger: Armed): void {
    if (this.armed.get(trigger.id) !== trigger) return;
    const before = (timer: Armed) =>
      timer.deadline < trigger.deadline || (timer.deadline === trigger.deadline && timer.seq < trigger.seq);
    const firing: Armed[] = [];
    for (const timer of this.armed.values()) if (timer !== trigger && before(timer)) firing.push(timer);
    firing.sort((a, b) => a.deadline - b.deadline || a.seq - b.seq);
    firing.push(trigger);
    for (const timer of firing) {
      this.clear(timer.id);
      this.fire(timer.id);
    }
  }
}
