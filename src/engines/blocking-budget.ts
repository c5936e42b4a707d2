/**
 * How long warm calls may hold a thread they share with other tenants: a process worker runs
 * quick warm calls synchronously on its only loop (decision 012), and while one runs, every
 * other request to that worker waits. One budget an engine (a worker), shared by all its
 * prefixes: a budget each let a tenant cycling through 20 prefixes, each answering quickly a few
 * times and then spinning, hold the loop ~80% of the time (red team, 2026-12-06).
 *
 * A call is let block only under a CPU limit of at most MAX_BLOCK_MS, and only while the
 * debt leaves room for a whole such call. The debt is what blocking crossings used past
 * the quick allowance (GATHER_MAX_CALL_MS a call in export-speeds.ts; a crossing a limit ended counts
 * its whole limit), paid back at REPAY_MS_PER_S. So a guest that answers quickly for a while and
 * then spins gets at most DEBT_MAX_MS of blocking at once and REPAY_MS_PER_S (5% of the thread)
 * after that; its calls cross the usual way (on the engine's own thread) meanwhile.
 *
 * Why a debt and not a count of slow calls: a trivial export's crossing reads over 1 ms of CPU
 * now and then (a collection in the isolate): measured, three such readings in the first 1,500
 * sequential calls of one run, which a "three strikes" rule turned into a permanent slow path.
 */
export const MAX_BLOCK_MS = 100;
const DEBT_MAX_MS = 200;
const REPAY_MS_PER_S = 50;

export class BlockingBudget {
  private debtMs = 0;
  private at = 0;

  /** May a crossing with this CPU limit block the thread now? */
  allows(limitMs: number): boolean {
    return limitMs <= MAX_BLOCK_MS && this.debt() + limitMs <= DEBT_MAX_MS;
  }

  /** A crossing that was allowed to block used `excessMs` past its quick allowance. */
  spend(excessMs: number): void {
    if (excessMs > 0) this.debtMs = this.debt() + excessMs;
  }

  private debt(): number {
    const now = performance.now();
    this.debtMs = Math.max(0, this.debtMs - ((now - this.at) / 1000) * REPAY_MS_PER_S);
    this.at = now;
    return this.debtMs;
  }
}
