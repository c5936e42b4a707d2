import { randomBytes } from "node:crypto";
import type { EnginePrefix } from "../core/engine.js";
import type { CallbackBindings } from "./callback-bindings.js";

interface Held {
  prefix: EnginePrefix;
  bindings: CallbackBindings;
  /** Requests using it now: an idle sweep never ends a busy prefix. */
  busy: number;
  lastUsed: number;
}

/**
 * The prefixes remote hosts prepared on this executor, by an unguessable handle. A client that
 * goes away without disposing leaves its prefixes behind: they end after `idleMs` unused, and
 * past `max` the least recently used idle one ends. A client whose prefix is gone gets
 * ERR_PREFIX_GONE and prepares it again.
 */
export class RemotePrefixes {
  private readonly held = new Map<string, Held>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly idleMs = 15 * 60_000,
    private readonly max = 4096,
  ) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, idleMs)).unref();
  }

  get size(): number {
    return this.held.size;
  }

  add(prefix: EnginePrefix, bindings: CallbackBindings): string {
    const handle = randomBytes(18).toString("base64url");
    this.held.set(handle, { prefix, bindings, busy: 0, lastUsed: Date.now() });
    if (this.held.size > this.max) this.evictOne();
    return handle;
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
    held.prefix.dispose();
    held.bindings.close();
    return true;
  }

  disposeAll(): void {
    clearInterval(this.sweeper);
    for (const held of this.held.values()) {
      held.prefix.dispose();
      held.bindings.close();
    }
    this.held.clear();
  }

  private sweep(): void {
    const cutoff = Date.now() - this.idleMs;
    for (const [handle, held] of this.held) {
      if (held.busy === 0 && held.lastUsed < cutoff) this.dispose(handle);
    }
  }

  private evictOne(): void {
    for (const [handle, held] of this.held) {
      if (held.busy === 0) {
        this.dispose(handle);
        return;
      }
    }
  }
}
