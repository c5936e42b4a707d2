import { randomBytes } from "node:crypto";
import type { EnginePrefix } from "../core/engine.js";
import type { CallbackBindings } from "./callback-bindings.js";

interface Held {
  prefix: EnginePrefix;
  bindings: CallbackBindings;
  /** The client it was prepared for (its address key): one client's share is bounded. */
  owner: string;
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
 * is refused (ERR_CAPACITY). A client whose prefix is gone gets ERR_PREFIX_GONE and prepares it again.
 */
export class RemotePrefixes {
  private readonly held = new Map<string, Held>();
  private readonly perOwner = new Map<string, number>();
  private chars = 0;
  private endedForRoom = 0;
  private refused = 0;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly idleMs = 15 * 60_000,
    private readonly caps: PrefixCaps = DEFAULT_PREFIX_CAPS,
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
  room(owner: string, bytes: number): string | undefined {
    const refused = this.findRoom(owner, bytes);
    if (refused) this.refused++;
    return refused;
  }

  private findRoom(owner: string, bytes: number): string | undefined {
    const { max, perAddress, maxChars } = this.caps;
    if (bytes > maxChars)
      return `this prefix keeps ${mib(bytes)} MiB of source, more than the ${mib(maxChars)} MiB all prefixes on this executor may keep (executor option maxPrefixMb, cordon serve --max-prefix-mb)`;
    while ((this.perOwner.get(owner) ?? 0) >= perAddress) {
      if (!this.evictIdle((held) => held.owner === owner))
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
  add(prefix: EnginePrefix, bindings: CallbackBindings, owner: string, bytes: number): { handle: string } | { refused: string } {
    const refused = this.room(owner, bytes);
    if (refused) return { refused };
    const handle = randomBytes(18).toString("base64url");
    this.held.set(handle, { prefix, bindings, owner, bytes, busy: 0, lastUsed: Date.now() });
    this.perOwner.set(owner, (this.perOwner.get(owner) ?? 0) + 1);
    this.chars += bytes;
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

  private sweep(): void {
    const cutoff = Date.now() - this.idleMs;
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

function mib(chars: number): string {
  return (chars / (1024 * 1024)).toFixed(1);
}
