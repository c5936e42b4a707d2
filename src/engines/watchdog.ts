/** Something whose time limits the watchdog checks. */
export interface Watched {
  /**
   * Check the limits at `now` (performance.now()); fire the one that is past. `processCpuUs`:
   * this process's CPU time so far, every thread (see Watchdog.processCpuUs).
   */
  checkLimits(now: number, processCpuUs: number): void;
}

/** How often running executions are checked: limits fire at most this late. */
export const WATCHDOG_TICK_MS = 5;

/**
 * One interval for every running execution instead of two timers per run: on the warm path a
 * call takes tens of microseconds, and arming and clearing timers per call was a measurable
 * share of it. Runs only while something is being watched, and stops at the first tick that
 * finds nothing: back-to-back calls do not arm and clear it each time.
 */
export class Watchdog {
  private readonly watched = new Set<Watched>();
  private timer: NodeJS.Timeout | undefined;
  private arming = false;
  private lastProcessCpuUs = currentProcessCpuUs();

  /**
   * This process's CPU time (µs, every thread) as of the last tick, or of the first watch after
   * an idle spell: one reading a tick, none a call. CPU a guest uses from now on in this process
   * can be at most the process's own from this reading on, since it was taken earlier. The
   * reading must be recent, not only earlier: the last tick before an idle spell counted the
   * host's work meanwhile as the guest's bound, and a guest on a contended core was charged
   * its wall time again and stopped after half its CPU limit (found by review).
   */
  get processCpuUs(): number {
    return this.lastProcessCpuUs;
  }

  /**
   * After an idle spell (a paced stream of one-off runs: every run), the reading is taken now
   * and the interval armed in a microtask: after the run's work is posted, not before (arming
   * it was ~18 µs of a paced one-off here, before its guest could start; the reading ~6).
   */
  watch(item: Watched): void {
    this.watched.add(item);
    if (this.timer !== undefined || this.arming) return;
    this.lastProcessCpuUs = currentProcessCpuUs();
    this.arming = true;
    queueMicrotask(() => {
      this.arming = false;
      this.timer ??= setInterval(() => this.tick(), WATCHDOG_TICK_MS);
    });
  }

  unwatch(item: Watched): void {
    this.watched.delete(item);
  }

  private tick(): void {
    if (this.watched.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const now = performance.now();
    const cpu = currentProcessCpuUs();
    this.lastProcessCpuUs = cpu;
    for (const item of this.watched) item.checkLimits(now, cpu);
  }
}

/** This process's CPU time so far, every thread, in µs. */
export function currentProcessCpuUs(): number {
  const used = process.cpuUsage();
  return used.user + used.system;
}

/** The process-wide watchdog of the v8 engine. */
export const watchdog = new Watchdog();
