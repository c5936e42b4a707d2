import type { BindingsLike } from "../../core/bindings.js";
import type { ResolvedLimits } from "../../core/limits.js";
import { CallLimitsSent } from "./answers.js";

/**
 * What the host keeps of the prefixes one worker process holds: which prepare made each handle,
 * its memory limit, the bindings its host calls reach, and the limits last sent with its calls.
 * A prefix is known by its handle (the worker's number for it) and by its owner (the id of the
 * prepare request that made it, which its bindings are kept under).
 */
export class PrefixRecords {
  /** Which prepare request (its id: the owner of the prefix's bindings) made each prefix handle. */
  private readonly owners = new Map<number, number>();
  /** Each prefix handle's memory limit in bytes, as the host sent it. */
  private readonly memory = new Map<number, number>();
  /** What the worker keeps of each prefix handle besides its instances (rss-budget.ts heldBytesOf). */
  private readonly kept = new Map<number, number>();
  private keptTotal = 0;
  /** Bindings of prefixes prepared in this worker, by the prepare's id: their host calls come back. */
  private readonly bindings = new Map<number, BindingsLike>();
  /**
   * Prefixes (by owner) disposed while runs or calls of theirs were in flight: their bindings stay
   * until the last one is answered. A call made before the dispose may need a new instance there,
   * whose prefix evaluation calls host functions; it failed with "the run is over" (found by review).
   */
  private readonly draining = new Set<number>();
  /** The limits last sent with a call to each prefix handle (the worker holds them too). */
  private readonly callLimits = new CallLimitsSent();

  /** How many prefix handles the worker holds. */
  get count(): number {
    return this.owners.size;
  }

  ownerOf(prefix: number): number | undefined {
    return this.owners.get(prefix);
  }

  bindingsOf(owner: number): BindingsLike | undefined {
    return this.bindings.get(owner);
  }

  /** The worker answered prepare `owner` with handle `prefix`; `memoryBytes` (and `keptBytes`) when it evaluated. */
  answered(prefix: number, owner: number, memoryBytes: number | undefined, keptBytes = 0): void {
    this.owners.set(prefix, owner);
    if (memoryBytes === undefined) return;
    this.memory.set(prefix, memoryBytes);
    this.forgetKept(prefix);
    this.kept.set(prefix, keptBytes);
    this.keptTotal += keptBytes;
  }

  /** What the worker keeps of the prefixes it holds, besides their instances: part of its memory budget. */
  get keptBytes(): number {
    return this.keptTotal;
  }

  private forgetKept(prefix: number): void {
    this.keptTotal -= this.kept.get(prefix) ?? 0;
    this.kept.delete(prefix);
  }

  /** Prepare `owner` made a prefix: its host calls reach `bindings` while its runs are in flight. */
  prepared(owner: number, bindings: BindingsLike): void {
    this.bindings.set(owner, bindings);
  }

  /** The most the prefixes' idle instances may hold: each one's memory limit times `instances`. */
  heldBytes(instances: number): number {
    let held = 0;
    for (const bytes of this.memory.values()) held += bytes * instances;
    return held;
  }

  /** `limits` to send with a call to `prefix`, or undefined when the worker holds them already. */
  callLimitsToSend(prefix: number, limits: ResolvedLimits): ResolvedLimits | undefined {
    return this.callLimits.toSend(prefix, limits);
  }

  /** The worker never got the limits last sent: the next call to `prefix` must carry them. */
  forgetCallLimits(prefix: number): void {
    this.callLimits.forget(prefix);
  }

  /** The prefix is disposed; with runs or calls of it `inFlight`, its bindings stay until they end. */
  disposed(prefix: number, owner: number, inFlight: boolean): void {
    this.callLimits.forget(prefix);
    if (inFlight) this.draining.add(owner);
    else this.bindings.delete(owner);
    this.owners.delete(prefix);
    this.memory.delete(prefix);
    this.forgetKept(prefix);
  }

  isDraining(owner: number): boolean {
    return this.draining.has(owner);
  }

  /** The last run or call of a disposed prefix was answered: its bindings go. */
  drained(owner: number): void {
    this.draining.delete(owner);
    this.bindings.delete(owner);
  }

  /** The worker died: no host call comes back from it. */
  clear(): void {
    this.bindings.clear();
    this.draining.clear();
  }
}
