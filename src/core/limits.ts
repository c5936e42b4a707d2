import type { RunLimits, SandboxPolicy } from "./types.js";

/** Every limit resolved to a number: what an engine enforces for one run. */
export type ResolvedLimits = Required<RunLimits>;

export const MIN_MEMORY_MB = 8;
export const MAX_MEMORY_MB = 1024;
/** Pending timers a guest may hold at once; the next setTimeout throws. */
export const MAX_PENDING_TIMERS = 1000;
/** Host calls a guest may have in flight at once; beyond it the call is refused. */
export const MAX_PENDING_HOST_CALLS = 256;

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
 * Check one numeric option and throw a TypeError that names it. Options are validated up front:
 * a wrong type is misconfiguration, never a run result.
 */
export function checkPositiveNumber(name: string, value: unknown, { integer = false } = {}): number {
  if (typeof value !== "number" || Number.isNaN(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    const want = integer ? "a positive integer" : "a positive number";
    throw new TypeError(`cordon: ${name} must be ${want}, got ${describe(value)}`);
  }
  return value;
}

export function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === "number" || typeof value === "boolean" || value == null) return String(value);
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}

/** Validate a user-supplied `limits` object: unknown keys and bad values throw a TypeError. */
export function checkLimits(limits: unknown, where = "limits"): RunLimits {
  if (limits === undefined) return {};
  if (limits === null || typeof limits !== "object" || Array.isArray(limits)) {
    throw new TypeError(`cordon: ${where} must be an object, got ${describe(limits)}`);
  }
  for (const [key, value] of Object.entries(limits)) {
    if (!(LIMIT_KEYS as string[]).includes(key)) {
      throw new TypeError(`cordon: ${where}.${key} is not a limit; known limits: ${LIMIT_KEYS.join(", ")}`);
    }
    if (value !== undefined) checkPositiveNumber(`${where}.${key}`, value);
  }
  return limits as RunLimits;
}

export function checkPolicy(policy: unknown): SandboxPolicy {
  if (policy === undefined) return {};
  if (policy === null || typeof policy !== "object" || Array.isArray(policy)) {
    throw new TypeError(`cordon: policy must be an object, got ${describe(policy)}`);
  }
  const known = ["maxMemoryMb", "maxWallTimeMs", "maxCpuTimeMs", "net"];
  for (const [key, value] of Object.entries(policy)) {
    if (!known.includes(key)) throw new TypeError(`cordon: policy.${key} is not a policy field; known: ${known.join(", ")}`);
    if (key !== "net" && value !== undefined) checkPositiveNumber(`policy.${key}`, value);
  }
  return policy as SandboxPolicy;
}

/**
 * Resolve the limits of one run: request over sandbox defaults over built-in defaults, then
 * clamped by the policy. A request can only narrow what the policy allows, never widen it.
 * CPU defaults to the wall time, and can never exceed it.
 */
export function resolveLimits(request: RunLimits, sandboxDefaults: RunLimits, policy: SandboxPolicy): ResolvedLimits {
  const merged: ResolvedLimits = { ...DEFAULT_LIMITS };
  for (const key of LIMIT_KEYS) {
    const value = request[key] ?? sandboxDefaults[key];
    if (value !== undefined) merged[key] = value;
  }
  if (request.cpuTimeMs === undefined && sandboxDefaults.cpuTimeMs === undefined) merged.cpuTimeMs = merged.wallTimeMs;

  const memoryCeiling = Math.min(policy.maxMemoryMb ?? MAX_MEMORY_MB, MAX_MEMORY_MB);
  merged.memoryMb = Math.floor(clamp(merged.memoryMb, MIN_MEMORY_MB, Math.max(memoryCeiling, MIN_MEMORY_MB)));
  if (policy.maxWallTimeMs !== undefined) merged.wallTimeMs = Math.min(merged.wallTimeMs, policy.maxWallTimeMs);
  if (policy.maxCpuTimeMs !== undefined) merged.cpuTimeMs = Math.min(merged.cpuTimeMs, policy.maxCpuTimeMs);
  merged.cpuTimeMs = Math.min(merged.cpuTimeMs, merged.wallTimeMs);
  for (const key of ["maxBridgeCalls", "maxLogEntries"] as const) merged[key] = Math.floor(merged[key]);
  return merged;
}

function clamp(value: number, min: number, max: number): number {
  return Math.min(Math.max(value, min), max);
}
