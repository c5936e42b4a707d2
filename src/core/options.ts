import { isAbortSignal } from "./abort-reason.js";
import { describe } from "./limits.js";

/** Throw a TypeError naming the first key of `value` that is not in `known` (typos never pass silently). */
export function checkKnownKeys(value: object, known: readonly string[], where: string): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      throw new TypeError(`cordon: ${where}.${key} is not an option; known options: ${known.join(", ")}`);
    }
  }
}

/**
 * An options object's own enumerable properties, each read once, in an object with no prototype;
 * an unknown key throws. Validate and use only the copy: a getter cannot pass the check and then
 * answer differently, and a key inherited from a polluted Object.prototype is never an option.
 */
export function ownOptions(value: unknown, known: readonly string[], where: string): Record<string, unknown> {
  checkObject(value, where);
  const own: Record<string, unknown> = Object.create(null);
  // Object.keys and one read each, not Object.entries: on the warm path entries took V8's slow
  // runtime path, 2.8% of the host's thread for v8 calls 64 in flight. A key an earlier getter
  // deleted is skipped, as entries skips it, so a read never reaches the prototype.
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    if (!known.includes(key)) {
      throw new TypeError(`cordon: ${where}.${key} is not an option; known options: ${known.join(", ")}`);
    }
    if (Object.hasOwn(value, key)) own[key] = value[key];
  }
  return own;
}

export function checkObject(value: unknown, where: string): asserts value is Record<string, unknown> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new TypeError(`cordon: ${where} must be an object, got ${describe(value)}`);
  }
}

export function checkOneOf<T extends string>(value: unknown, allowed: readonly T[], where: string): T {
  if (typeof value !== "string" || !(allowed as readonly string[]).includes(value)) {
    throw new TypeError(`cordon: ${where} must be one of ${allowed.map((a) => `"${a}"`).join(", ")}, got ${describe(value)}`);
  }
  return value as T;
}

/** The longest module source a run takes, as `code` and as each source import (characters). */
export const MAX_CODE_LENGTH = 16 * 1024 * 1024;

export function checkString(value: unknown, where: string, maxLength: number): string {
  if (typeof value !== "string") throw new TypeError(`cordon: ${where} must be a string, got ${describe(value)}`);
  if (value.length > maxLength) throw new TypeError(`cordon: ${where} is longer than ${maxLength} characters`);
  return value;
}

/**
 * A module's name (a filename, an import specifier). It names the guest's frames in stacks, so
 * it may not be empty, hold control characters or U+2063 (the tag QuickJS's module names carry),
 * or take cordon's own names: frames of "<cordon>" are the runtime's, kept out of guest stacks
 * by that name, and "cordon:" specifiers are the engines' internal modules.
 */
export function checkModuleName(value: unknown, where: string, maxLength: number): string {
  const name = checkString(value, where, maxLength);
  if (name.length === 0) throw new TypeError(`cordon: ${where} must not be empty`);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point.
  if (/[\u0000-\u001f\u007f\u2063]/.test(name)) throw new TypeError(`cordon: ${where} must not contain control characters`);
  if (name === "<cordon>" || name.startsWith("cordon:"))
    throw new TypeError(`cordon: ${where} ${JSON.stringify(name)} is one of cordon's own names`);
  return name;
}

export function checkSignal(value: unknown, where: string): AbortSignal | undefined {
  if (value === undefined) return undefined;
  // The native getter, not instanceof: an object made from AbortSignal.prototype passed
  // instanceof, then threw deep inside a call after the pool had counted an instance busy.
  if (!isAbortSignal(value)) throw new TypeError(`cordon: ${where} must be an AbortSignal, got ${describe(value)}`);
  return value;
}
