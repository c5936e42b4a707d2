/** Text on its way into the isolate, and what comes back out of it: helpers of V8Instance's crossings. */
import type * as IVM from "isolated-vm";
import { TEXT_SEPARATOR } from "../../core/joined-texts.js";
import { loadIsolatedVm } from "./load.js";

/**
 * From this many characters a string may be 1 KB or more (two bytes a character), where
 * isolated-vm hands it to the isolate as an external string (its ExternalCopyString::CopyInto).
 */
const EXTERNAL_FROM_CHARS = 512;

/**
 * A text as it should cross into the isolate: short ones as they are (flattened), longer ones
 * inside a one-element array, which the runtime unwraps (HostText in ../guest/runtime.ts).
 *
 * isolated-vm gives the isolate a string of 1 KB or more as an external string: its characters
 * stay in this process's malloc heap until the isolate's next full collection, and an isolate
 * that allocates little on its own heap (a prefix serving calls) reaches one only near its memory
 * limit. Measured, 25 KB of joined events a crossing into a 128 MB isolate: this process grew 25
 * MB every 1,000 crossings until the isolate collected at ~124 MB of them, and each crossing
 * faulted fresh pages in on this thread, 70 µs of `apply` against 13 µs once memory was reused
 * (the slow climb of the events bench, 60k → 160k/s over its first ~500k events). An array is
 * copied by V8's serializer instead, its buffer freed as soon as the isolate has read it, and the
 * string lands in the isolate's heap, where young collections take it: 13–15 µs from the first
 * crossing, the process flat at its size.
 */
export function intoIsolate(text: string): string | IVM.Copy<[string]> {
  if (text.length < EXTERNAL_FROM_CHARS) return flat(text);
  return new (loadIsolatedVm().ExternalCopy)<[string]>([text]).copyInto({ release: true });
}

/**
 * Make V8 flatten a string before it crosses. isolated-vm copies a cons string (a concatenation
 * V8 has not flattened yet: codec text is " " + JSON, joined calls are joins) far slower than a
 * flat one: measured here, 64 joined events 45 µs per crossing as a cons string, 24 µs joined
 * and flattened; one event 6.5 µs vs 4.6 µs. Converting to a number reads the characters, which
 * flattens the string in place (the trick pino's flatstr uses).
 */
export function flat(text: string): string {
  void ((text as unknown as number) | 0);
  return text;
}

/** Whether joined outcomes hold one still to come ("p"). */
export function hasPending(joined: string): boolean {
  return joined === "p" || joined.startsWith(`p${TEXT_SEPARATOR}`) || joined.includes(`${TEXT_SEPARATOR}p`);
}

/** isolated-vm's text for a thrown object that is no Error: it copies such an object no further. */
const LOST_THROW = "An object was thrown from supplied code within isolated-vm, but that object was not an instance of `Error`.";

/**
 * What a module's top-level code throws, and what rejects a promise nothing handles, reach the
 * host only through isolated-vm, which keeps primitives and Errors and replaces any other object
 * with LOST_THROW: no guest code can catch such a throw to report it first (the runtime does for
 * calls, timers and script-form modules). Say what happened, in cordon's terms. A guest that throws
 * an Error with that very message only renames its own error.
 */
export function renameLostThrow(error: unknown): never {
  if (error instanceof Error && error.message === LOST_THROW) {
    throw new Error(
      "Uncaught object (not an Error: thrown at a module's top level, or rejecting a promise nothing handled, where the v8 engine cannot show it; throw an Error to report a message)",
    );
  }
  throw error;
}
