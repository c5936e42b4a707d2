import { ownData } from "./own-data.js";
import type { RunLimits, SandboxPolicy } from "./types.js";

/** Every limit resolved to a number: what an engine enforces for one run. */
export type ResolvedLimits = Required<RunLimits>;

export const MIN_MEMORY_MB = 8;
export const MAX_MEMORY_MB = 1024;
/** Pending timers a guest may hold at once; the next setTimeout throws. */
export const MAX_PENDING_TIMERS = 1000;
/**
 * The longest timer delay: setTimeout's own bound (past it Node fires after 1 ms and prints a
 * warning on the host's stderr). The guest runtime clamps to it; the host checks and clamps again.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** Host calls a guest may have in flight at once; beyond it the call is refused. */
export const MAX_PENDING_HOST_CALLS = 256;
/**
 * A run's host calls in flight may hold at most this many times its maxBridgeCallBytes of
 * arguments together. The host keeps a copy of each call's arguments until it answers, so without
 * it one string passed to 256 slow calls took 256 copies of host memory, outside every limit.
 */
export const PENDING_ARGS_FACTOR = 4;

export const DEFAULT_LIMITS: ResolvedLimits = {
  wallTimeMs: 5000,
  cpuTimeMs: 5000,
  memoryMb: 128,
  maxOutputBytes: 16 * 1024 * 1024,
  maxLogBytes: 1024 * 1024,
  maxLogEntries: 1000,
  maxBridgeCalls: 1000,
  maxBridgeCallBytes: 16 * 1024 * 1024,
};

const LIMIT_KEYS = Object.keys(DEFAULT_LIMITS) as (keyof ResolvedLimits)[];

/**
 * The largest time limit: Node's timers take at most 2^31-1 ms (a longer delay fires after 1 ms),
 * and fences and backstops add their slack to a run's wall time.
 */
export const MAX_TIME_MS = 2_000_000_000;
/** The largest count or size limit: the guest runtime and v8's shared-memory calls hold them as 32-bit integers. */
export const MAX_COUNT = 2 ** 31 - 1;

/**
 * Check one numeric option and throw a TypeError that names it. Options are validated up front:
 * a wrong type is misconfiguration, never a run result. Infinity is refused too: a limit is a
 * number something enforces (on the pipes to worker processes it would turn into null).
 */
export function checkPositiveNumber(name: string, value: unknown, { integer = false, max = MAX_COUNT } = {}): number {
  if (typeof value !== "number" || !(value > 0 && value <= max) || (integer && !Number.isInteger(value))) {
    const want = integer ? "a positive integer" : "a positive number";
    throw new TypeError(`cordon: ${name} must be ${want} up to ${max}, got ${describe(value)}`);
  }
  return value;
}

/** The largest value each limit (and its policy ceiling) may have. */
function maxOf(key: string): number {
  return key === "wallTimeMs" || key === "cpuTimeMs" || key === "maxWallTimeMs" || key === "maxCpuTimeMs"
    ? MAX_TIME_MS
    : MAX_COUNT;
}

/** Text of the caller's own making, cut for a message. */
export function shortened(text: string, max = 40): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

export function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(shortened(value));
  if (typeof value === "number" || typeof value === "boolean" || value == null) return String(value);
  if (Array.isArray(value)) return "an array";
  // "an object", "a function", "a bigint", "a symbol"
  return `${typeof value === "object" ? "an" : "a"} ${typeof value}`;
}

/**
 * Validate a user-supplied `limits` object: unknown keys and bad values throw a TypeError. Returns
 * a copy of the values checked (own keys, each read once, no prototype): a getter cannot answer
 * differently later, and a key inherited from a polluted Object.prototype is never a limit.
 */
export function checkLimits(limits: unknown, where = "limits"): RunLimits {
  const checked: Record<string, number> = Object.create(null);
  if (limits === undefined) return checked;
  if (limits === null || typeof limits !== "object" || Array.isArray(limits)) {
    throw new TypeError(`cordon: ${where} must be an object, got ${describe(limits)}`);
  }
  for (const [key, value] of Object.entries(limits)) {
    if (!(LIMIT_KEYS as string[]).includes(key)) {
      throw new TypeError(`cordon: ${where}.${key} is not a limit; known limits: ${LIMIT_KEYS.join(", ")}`);
    }
    if (value !== undefined) checked[key] = checkPositiveNumber(`${where}.${key}`, value, { max: maxOf(key) });
  }
  return checked;
}

export function checkPolicy(policy: unknown): SandboxPolicy {
  if (policy === undefined) return {};
  if (policy === null || typeof policy !== "object" || Array.isArray(policy)) {
    throw new TypeError(`cordon: policy must be an object, got ${describe(policy)}`);
  }
  const known = ["maxMemoryMb", "maxWallTimeMs", "maxCpuTimeMs", "net"];
  // A copy, as checkLimits makes: own keys read once, no prototype to inherit a ceiling from.
  const checked: Record<string, unknown> = Object.create(null);
  for (const [key, value] of Object.entries(policy)) {
    if (!known.includes(key)) throw new TypeError(`cordon: policy.${key} is not a policy field; known: ${known.join(", ")}`);
    if (value === undefined) continue;
    checked[key] =
      key === "net" ? ownData(value, "policy.net") : checkPositiveNumber(`policy.${key}`, value, { max: maxOf(key) });
  }
  // A ceiling is never widened: one below the smallest instance cordon makes cannot be honoured.
  if (typeof checked.maxMemoryMb === "number" && checked.maxMemoryMb < MIN_MEMORY_MB) {
    throw new TypeError(
      `cordon: policy.maxMemoryMb must be at least ${MIN_MEMORY_MB} (the smallest instance), got ${checked.maxMemoryMb}`,
    );
  }
  return checked as SandboxPolicy;
}

/**
 * Resolve the limits of one run: request over sandbox defaults over built-in defaults, then
 * clamped by the policy. A request can only narrow what the policy allows, never widen it.
 * CPU defaults to the wall time, and can never exceed it.
 */
export function resolveLimits(request: RunLimits, sandboxDefaults: RunLimits, policy: SandboxPolicy): ResolvedLimits {
  const merged: ResolvedLimits = { ...DEFAULT_LIMITS };
  // Own keys only: a key inherited from a polluted Object.prototype is never a limit or a ceiling.
  const own = <T extends object, K extends keyof T>(from: T, key: K): T[K] | undefined =>
    Object.hasOwn(from, key) ? from[key] : undefined;
  for (const key of LIMIT_KEYS) {
    const value = own(request, key) ?? own(sandboxDefaults, key);
    if (value !== undefined) merged[key] = value;
  }
  if (own(request, "cpuTimeMs") === undefined && own(sandboxDefaults, "cpuTimeMs") === undefined)
    merged.cpuTimeMs = merged.wallTimeMs;

  const maxMemoryMb = own(policy, "maxMemoryMb");
  const maxWallTimeMs = own(policy, "maxWallTimeMs");
  const maxCpuTimeMs = own(policy, "maxCpuTimeMs");
  const memoryCeiling = Math.min(maxMemoryMb ?? MAX_MEMORY_MB, MAX_MEMORY_MB);
  merged.memoryMb = Math.floor(clamp(merged.memoryMb, MIN_MEMORY_MB, Math.max(memoryCeiling, MIN_MEMORY_MB)));
  if (maxWallTimeMs !== undefined) merged.wallTimeMs = Math.min(merged.wallTimeMs, maxWallTimeMs);
  if (maxCpuTimeMs !== undefined) merged.cpuTimeMs = Math.min(merged.cpuTimeMs, maxCpuTimeMs);
  merged.cpuTimeMs = Math.min(merged.cpuTimeMs, merged.wallTimeMs);
  for (const key of ["maxBridgeCalls", "maxLogEntries"] as const) merged[key] = Math.floor(merged[key]);
  return merged;
}

function clamp(value: number, min: number, max: number): number {
  return Math.min(Math.max(value, min), max);
}

/**
 * Characters an encoding in a v8 isolate may write, per byte of its heap limit: an eighth, so a
 * copy of two-byte text takes at most a quarter of the heap (Codec.limitCopies). The guest
 * bundle reads the heap limit back from it, for resizable ArrayBuffers (resizable-budget.ts).
 */
export const COPY_CHARS_PER_HEAP_BYTE = 1 / 8;

/**
 * A fetch's request and response bodies may be at most maxBridgeCallBytes / this: the message that
 * carries one holds it as base64 (4/3) plus its headers and the wire's tags (capabilities.ts).
 */
export const BRIDGE_BYTES_PER_BODY_BYTE = 1.5;
