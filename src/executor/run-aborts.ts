/**
 * Remote runs a client may abort by message (`{ t: "abort", abortId }` on `POST /host`), so that
 * its answer still comes on the run's own request: an aborted run's result, with the lines its
 * guest logged before the abort. Closing the request aborts too, but then nothing can be answered.
 *
 * Keyed by the client's id (CLIENT_HEADER) and the run's abortId, a random id the client made for
 * it: a client aborts only runs whose ids it knows. Entries live while their request is served.
 *
 * An abort may also come before its run: the two travel on different connections, and a run
 * aborted just after it was sent, or still queued in the client behind busy connections, is
 * overtaken. Such an abort is remembered (EARLY_ABORT_MS, bounded in count and characters), and
 * the run, when it comes, is answered at once as aborted. Forgotten, it started and ran until the
 * client closed its request (ABORT_ANSWER_MS later), and was answered with nothing. One address
 * holds at most a quarter of the early aborts (EARLY_ABORTS_PER_ADDRESS): client ids are the
 * clients' own to choose, so one client sending junk aborts pushed out every other's.
 */
export class RunAborts {
  private readonly running = new Map<string, AbortController>();
  /** Aborts that named no running run, oldest first: the reason and when it came. */
  private readonly early = new Map<string, { reason: string; at: number; address: string }>();
  private earlyChars = 0;
  /** Early aborts held, by the address that sent them. */
  private readonly byAddress = new Map<string, number>();

  constructor(
    private readonly limits = {
      ms: EARLY_ABORT_MS,
      count: EARLY_ABORTS,
      chars: EARLY_ABORT_CHARS,
      perAddress: EARLY_ABORTS_PER_ADDRESS,
    },
    private readonly now = () => performance.now(),
  ) {}

  /**
   * Run `abortId` of `client` begins: its signal aborts when an abort message names it (at once,
   * if one already did). `end` when it is answered.
   */
  begin(client: string, abortId: string): { signal: AbortSignal; end(): void } {
    const key = keyOf(client, abortId);
    const controller = new AbortController();
    const early = this.takeEarly(key);
    if (early !== undefined) {
      controller.abort(early);
      return { signal: controller.signal, end: () => {} };
    }
    // An id already in use (a client that repeats one) leaves the first run its entry.
    if (this.running.has(key)) return { signal: controller.signal, end: () => {} };
    this.running.set(key, controller);
    return { signal: controller.signal, end: () => this.running.delete(key) };
  }

  /**
   * Abort run `abortId` of `client` with `reason`: the one being served, else the one still to
   * come (held against `address`'s share).
   */
  abort(client: string, abortId: string, reason: string, address = ""): void {
    const key = keyOf(client, abortId);
    const running = this.running.get(key);
    if (running) running.abort(reason);
    else this.remember(key, reason, address);
  }

  /** How many aborts wait for their runs (expired ones included until they are dropped). */
  get waiting(): number {
    return this.early.size;
  }

  private remember(key: string, reason: string, address: string): void {
    this.forget(key);
    this.early.set(key, { reason, at: this.now(), address });
    this.earlyChars += reason.length;
    const held = (this.byAddress.get(address) ?? 0) + 1;
    this.byAddress.set(address, held);
    if (held > this.limits.perAddress) {
      // Past its share: this address's oldest goes, not another's.
      for (const [oldest, entry] of this.early) {
        if (entry.address !== address) continue;
        this.forget(oldest);
        break;
      }
    }
    // The oldest go first: expired ones, then any past the bounds (a client that aborts runs
    // already answered leaves one each, which nothing ever takes).
    const expired = this.now() - this.limits.ms;
    for (const [oldest, entry] of this.early) {
      const over = this.early.size > this.limits.count || this.earlyChars > this.limits.chars;
      if (!over && entry.at >= expired) break;
      this.forget(oldest);
    }
  }

  private takeEarly(key: string): string | undefined {
    const entry = this.early.get(key);
    if (!entry) return undefined;
    this.forget(key);
    return this.now() - entry.at <= this.limits.ms ? entry.reason : undefined;
  }

  private forget(key: string): void {
    const entry = this.early.get(key);
    if (!entry) return;
    this.early.delete(key);
    this.earlyChars -= entry.reason.length;
    const held = (this.byAddress.get(entry.address) ?? 1) - 1;
    if (held > 0) this.byAddress.set(entry.address, held);
    else this.byAddress.delete(entry.address);
  }
}

/**
 * How long an abort waits for a run that has not come. The client closes a run's request
 * ABORT_ANSWER_MS (1 s) after asking: a run not sent by then never is.
 */
export const EARLY_ABORT_MS = 10_000;
/** At most this many aborts wait at once, and their reasons hold at most EARLY_ABORT_CHARS (each up to ABORT_REASON_CHARS, core/protocol.ts). */
export const EARLY_ABORTS = 4096;
export const EARLY_ABORTS_PER_ADDRESS = EARLY_ABORTS / 4;
export const EARLY_ABORT_CHARS = 1_048_576;

function keyOf(client: string, abortId: string): string {
  return `${client}\n${abortId}`;
}
