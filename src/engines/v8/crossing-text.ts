/** Text on its way into the isolate, and what comes back out of it: helpers of V8Instance's crossings. */

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
  return joined === "p" || joined.startsWith("p\u0001") || joined.includes("\u0001p");
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
