import { randomBytes } from "node:crypto";
import type { EnginePrefix } from "../core/engine.js";
import type { CallbackBindings } from "./callback-bindings.js";

interface Held {
  prefix: EnginePrefix;
  bindings: CallbackBindings;
  /** The client it was prepared for (its address key): one client's share is bounded. */
  owner: string;
  /** The client's key for it (a hash of its source): the same prefix prepared again has it again. */
  key: string;
  /** The client instance that prepared it (CLIENT_HEADER; "" for a client that sends none). */
  client: string;
  /** Characters of source, imports and bindings it keeps (to prepare it again). */
  bytes: number;
  /** Requests using it now: an idle sweep never ends a busy prefix. */
  busy: number;
  lastUsed: number;
}

export interface PrefixCaps {
  /** Prefixes held at once, across all clients. */
  max: number;
  /** Of those, prepared for one client address (an IPv6 /64). */
  perAddress: number;
  /** Characters of source (imports and bindings included) the held prefixes keep, together. */
  maxChars: number;
}

export const DEFAULT_PREFIX_CAPS: PrefixCaps = { max: 4096, perAddress: 2048, maxChars: 512 * 1024 * 1024 };

/**
 * A prefix ended at its client's own cap and prepared again by that client within this long: the
 * client uses more prefixes at once than its cap: only one of its own unused this long may end for
 * it, and the prepare is refused when none is (see `room`). "That client": the same address and
 * the same client instance (a restarted client's new instance preparing its old prefixes' keys is
 * not cycling: those end for it as any idle prefix of its address does).
 */
export const CYCLING_WINDOW_MS = 60_000;

/** What `GET /health` shows of the held prefixes: counts and sizes only, never a client or a key. */
export interface PrefixStats {
  held: number;
  busy: number;
  /** Client addresses holding any, and the most one of them holds. */
  clients: number;
  mostByOneClient: number;
  sourceMib: number;
  /** Since start: idle prefixes ended to make room, and prepares refused for room (ERR_CAPACITY). */
  endedForRoom: number;
  refused: number;
  caps: { maxPrefixes: number; maxPrefixesPerAddress: number; maxPrefixMb: number };
}

/**
 * The prefixes remote hosts prepared on this executor, by an unguessable handle. A client that
 * goes away without disposing leaves its prefixes behind: they end after `idleMs` unused. Past a
 * cap (count, one client's count, source kept) the least recently used idle prefix ends — one
 * client's own when it is that client's cap — and when every candidate is in use the new prepare
 * is refused (ERR_CAPACITY). A client whose prefix is gone gets ERR_PREFIX_GONE and prepares it again;
 * one that cycles through more prefixes than its cap is refused rather than re-preparing on every call.
 */
export class RemotePrefixes {
  private readonly held = new Map<string, Held>();
  private readonly perOwner = new Map<string, number>();
  private chars = 0;
  /**
   * noteId(owner, key) → when a prefix of that key was ended at that owner's own cap, and the
   * client instance that had prepared it (oldest first).
   */
  private readonly endedAtCap = new Map<string, { at: number; client: string }>();
  private endedForRoom = 0;
  private refused = 0;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly idleMs = 15 * 60_000,
    private readonly caps: PrefixCaps = DEFAULT_PREFIX_CAPS,
    private readonly cyclingWindowMs = CYCLING_WINDOW_MS,
  ) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, idleMs)).unref();
  }

  get size(): number {
    return this.held.size;
  }

  /**
   * Make room for a prefix of `bytes` for `owner`, ending idle prefixes as the caps require.
   * Returns why there is no room (every prefix that would have to end is in use), or undefined.
   */
  room(owner: string, bytes: number, key = "", client = ""): string | undefined {
    const refused = this.findRoom(owner, bytes, key, client);
    if (refused) this.refused++;
    return refused;
  }

  private findRoom(owner: string, bytes: number, key: string, client: string): string | undefined {
    const { max, perAddress, maxChars } = this.caps;
    if (bytes > maxChars)
      return `this prefix keeps ${mib(bytes)} MiB of source, more than the ${mib(maxChars)} MiB all prefixes on this executor may keep (executor option maxPrefixMb, cordon serve --max-prefix-mb)`;
    // A client using more prefixes at once than its cap: each prepare ended another of its own,
    // prepared again on its next call (measured: 28 to 30 of 30 calls cold, 3 prefixes called in
    // turn at a cap of 2). When it prepares again one that ended at its cap within the window, only a
    // prefix of its own unused for the window may end for it; when none is, it is refused at once.
    // Another instance's prefix of that key (a restarted client's old one) is no sign of cycling.
    const ended = this.endedAtCap.get(noteId(owner, key));
    const cycling = ended !== undefined && ended.client === client && Date.now() - ended.at < this.cyclingWindowMs;
    while ((this.perOwner.get(owner) ?? 0) >= perAddress) {
      const unusedSince = Date.now() - this.cyclingWindowMs;
      const evicted = this.evictIdle((held) => held.owner === owner && (!cycling || held.lastUsed <= unusedSince));
      if (evicted) this.noteEndedAtCap(evicted);
      else if (cycling)
        return `this client uses more prefixes at once than the ${perAddress} one client address may hold on this executor (executor option maxPrefixesPerAddress, cordon serve --max-prefixes-per-address): this one ended ${Math.round((Date.now() - (ended?.at ?? 0)) / 1000)} s ago to make room for another of its own, and each of those was used within ${this.cyclingWindowMs / 1000} s; raise the cap or dispose the prefixes it no longer uses`;
      else
        return `this client already holds ${perAddress} prefixes on this executor, all in use: the most one client address may hold (executor option maxPrefixesPerAddress, cordon serve --max-prefixes-per-address); dispose the prefixes it no longer uses`;
    }
    while (this.held.size >= max) {
      if (!this.evictIdle())
        return `this executor holds ${max} prefixes, all in use: its most (executor option maxPrefixes, cordon serve --max-prefixes); retry later`;
    }
    while (this.chars + bytes > maxChars) {
      if (!this.evictIdle())
        return `the prefixes on this executor, all in use, keep ${mib(this.chars)} MiB of source: with this one past the ${mib(maxChars)} MiB they may keep (executor option maxPrefixMb, cordon serve --max-prefix-mb); retry later`;
    }
    return undefined;
  }

  /** Hold a prepared prefix; a refusal (no room: see `room`) when it cannot be held, and it is not. */
  add(
    prefix: EnginePrefix,
    bindings: CallbackBindings,
    owner: string,
    bytes: number,
    key = "",
    client = "",
  ): { handle: string } | { refused: string } {
    const refused = this.room(owner, bytes, key, client);
    if (refused) return { refused };
    const handle = randomBytes(18).toString("base64url");
    this.held.set(handle, { prefix, bindings, owner, key, client, bytes, busy: 0, lastUsed: Date.now() });
    this.perOwner.set(owner, (this.perOwner.get(owner) ?? 0) + 1);
    this.chars += bytes;
    this.endedAtCap.delete(noteId(owner, key));
    return { handle };
  }

  /** Use a prefix for one request; undefined when it is gone. */
  async use<T>(handle: string, work: (held: Held) => Promise<T>): Promise<T | undefined> {
    const held = this.held.get(handle);
    if (!held) return undefined;
    // Most recently used last.
    this.held.delete(handle);
    this.held.set(handle, held);
    held.busy++;
    try {
      return await work(held);
    } finally {
      held.busy--;
      held.lastUsed = Date.now();
    }
  }

  dispose(handle: string): boolean {
    const held = this.held.get(handle);
    if (!held) return false;
    this.held.delete(handle);
    const owned = (this.perOwner.get(held.owner) ?? 1) - 1;
    if (owned > 0) this.perOwner.set(held.owner, owned);
    else this.perOwner.delete(held.owner);
    this.chars -= held.bytes;
    held.prefix.dispose();
    held.bindings.close();
    return true;
  }

  disposeAll(): void {
    clearInterval(this.sweeper);
    for (const handle of [...this.held.keys()]) this.dispose(handle);
  }

  /** Aggregates for `GET /health` (which is open): no client address, key or handle. */
  stats(): PrefixStats {
    let busy = 0;
    for (const held of this.held.values()) if (held.busy > 0) busy++;
    let mostByOneClient = 0;
    for (const count of this.perOwner.values()) mostByOneClient = Math.max(mostByOneClient, count);
    const { max, perAddress, maxChars } = this.caps;
    return {
      held: this.held.size,
      busy,
      clients: this.perOwner.size,
      mostByOneClient,
      sourceMib: Number(mib(this.chars)),
      endedForRoom: this.endedForRoom,
      refused: this.refused,
      caps: { maxPrefixes: max, maxPrefixesPerAddress: perAddress, maxPrefixMb: maxChars / (1024 * 1024) },
    };
  }

  private noteEndedAtCap({ owner, key, client }: Held): void {
    const id = noteId(owner, key);
    this.endedAtCap.delete(id);
    this.endedAtCap.set(id, { at: Date.now(), client });
    // Bounded like the prefixes themselves: the oldest notes go first.
    for (const oldest of this.endedAtCap.keys()) {
      if (this.endedAtCap.size <= this.caps.max) break;
      this.endedAtCap.delete(oldest);
    }
  }

  private sweep(): void {
    const cutoff = Date.now() - this.idleMs;
    for (const [id, { at }] of this.endedAtCap) {
      if (Date.now() - at < this.cyclingWindowMs) break;
      this.endedAtCap.delete(id);
    }
    for (const [handle, held] of this.held) {
      if (held.busy === 0 && held.lastUsed < cutoff) this.dispose(handle);
    }
  }

  /** End the least recently used idle prefix (that `which` picks); undefined when there is none. */
  private evictIdle(which: (held: Held) => boolean = () => true): Held | undefined {
    for (const [handle, held] of this.held) {
      if (held.busy === 0 && which(held)) {
        this.dispose(handle);
        this.endedForRoom++;
        return held;
      }
    }
    return undefined;
  }
}

/** What `endedAtCap` notes a prefix by: its client's address key and its client's key for it. */
function noteId(owner: string, key: string): string {
  return `${owner} ${key}`;
}

function mib(chars: number): string {
  return (chars / (1024 * 1024)).toFixed(1);
}
