/**
 * Remote runs a client may abort by message (`{ t: "abort", abortId }` on `POST /host`), so that
 * its answer still comes on the run's own request: an aborted run's result, with the lines its
 * guest logged before the abort. Closing the request aborts too, but then nothing can be answered.
 *
 * Keyed by the client's id (CLIENT_HEADER) and the run's abortId, a random id the client made for
 * it: a client aborts only runs whose ids it knows. Entries live while their request is served.
 */
export class RunAborts {
  private readonly running = new Map<string, AbortController>();

  /** Run `abortId` of `client` begins: its signal aborts when an abort message names it. `end` when it is answered. */
  begin(client: string, abortId: string): { signal: AbortSignal; end(): void } {
    const key = keyOf(client, abortId);
    const controller = new AbortController();
    // An id already in use (a client that repeats one) leaves the first run its entry.
    if (this.running.has(key)) return { signal: controller.signal, end: () => {} };
    this.running.set(key, controller);
    return { signal: controller.signal, end: () => this.running.delete(key) };
  }

  /** Abort run `abortId` of `client` with `reason`, if it is being served. */
  abort(client: string, abortId: string, reason: string): void {
    this.running.get(keyOf(client, abortId))?.abort(reason);
  }
}

function keyOf(client: string, abortId: string): string {
  return `${client}\n${abortId}`;
}
