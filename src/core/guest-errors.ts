import { sharedCodec } from "./bindings.js";
import type { ErrorCode, RunError } from "./errors.js";

/**
 * Keep only what a caller may see of a guest stack: the message lines and the frames of the
 * guest's own modules. Host paths, node_modules, data: URLs, runtime frames and isolated-vm's
 * boundary markers are dropped.
 */
export function sanitizeStack(stack: string, guestFiles: ReadonlySet<string>): string {
  const lines = stack.split("\n");
  const out: string[] = [];
  let inFrames = false;
  for (const line of lines) {
    const isFrame = /^\s+at /.test(line);
    if (!isFrame && !inFrames) {
      out.push(line);
      continue;
    }
    inFrames = true;
    if (!isFrame) continue;
    for (const file of guestFiles) {
      if (line.includes(`(${file}:`) || line.includes(`at ${file}:`)) {
        out.push(line);
        break;
      }
    }
  }
  return out.join("\n");
}

/** A frame of the runtime's own file ("<cordon>"), and what follows it on its line. */
const RUNTIME_FRAME = /^\s+at (?:.*\(<cordon>:\d+(?::\d+)?\)|<cordon>:\d+(?::\d+)?)(.*)$/;

/**
 * `text` (a log line, which may hold a stack among other text) without the runtime's frames; what
 * followed a dropped frame on its line (the ` }` closing a logged object) joins the line before.
 * A logged error showed them (`at outcomeOf (<cordon>:4090:33)`) where a thrown one never did.
 */
export function withoutRuntimeFrames(text: string): string {
  if (!text.includes("<cordon>:")) return text;
  const out: string[] = [];
  for (const line of text.split("\n")) {
    const frame = RUNTIME_FRAME.exec(line);
    if (!frame) out.push(line);
    else if (out.length > 0) out[out.length - 1] += frame[1];
  }
  return out.join("\n");
}

/** Uncaught guest errors that mean "out of memory" rather than a bug in the guest. */
function isMemoryExhaustion(name: string, message: string): boolean {
  // QuickJS: its allocator's refusal, and its maximum string length.
  if (
    name === "InternalError" &&
    (message === "out of memory" || message === "string too long" || message === "out of memory in regexp execution")
  )
    return true;
  return (
    name === "RangeError" &&
    (message === "Array buffer allocation failed" ||
      message === "Invalid string length" ||
      message.startsWith("Invalid typed array length") ||
      message.startsWith("Array buffer allocation failed"))
  );
}

/** Turn an error the guest threw (already decoded on the host as data) into a RunError. */
export function guestThrown(value: unknown, guestFiles: ReadonlySet<string>): RunError {
  if (value instanceof Error) {
    const name = typeof value.name === "string" ? value.name : "Error";
    const message = typeof value.message === "string" ? value.message : "";
    const fields: Record<string, unknown> = {};
    // Define, never assign: an own "__proto__" field must stay data on the host.
    for (const key of Object.keys(value)) {
      const field = (value as unknown as Record<string, unknown>)[key];
      Object.defineProperty(fields, key, { value: field, enumerable: true, writable: true, configurable: true });
    }
    let code: ErrorCode = "ERR_USER_CODE";
    if (isMemoryExhaustion(name, message)) code = "ERR_MEMORY_LIMIT";
    else if (fields.code === "ERR_NOT_SERIALIZABLE" && typeof fields.path === "string") code = "ERR_NOT_SERIALIZABLE";
    else if (fields.code === "ERR_CAPABILITY_DENIED" && typeof fields.check === "string") code = "ERR_CAPABILITY_DENIED";
    // The runtime's refusal of a host call's arguments over maxBridgeCallBytes (runtime.ts argsTooLarge).
    else if (fields.code === "ERR_BRIDGE_PAYLOAD_TOO_LARGE" && fields.path === "args") code = "ERR_BRIDGE_PAYLOAD_TOO_LARGE";
    const error: RunError = { code, name, message };
    if (typeof value.stack === "string") error.stack = sanitizeStack(value.stack, guestFiles);
    // Own but not enumerable on the errors that have them natively (an AggregateError's errors).
    for (const key of ["cause", "errors"])
      if (Object.hasOwn(value, key) && !Object.hasOwn(fields, key))
        Object.defineProperty(fields, key, {
          value: (value as unknown as Record<string, unknown>)[key],
          enumerable: true,
          writable: true,
          configurable: true,
        });
    if (Object.keys(fields).length > 0) error.fields = fields;
    return error;
  }
  let shown: string;
  try {
    // Without the leading space that marks plain JSON text (codec-fast-path.ts).
    shown = sharedCodec().encode(value, "thrown", 2000).trimStart();
  } catch {
    shown = typeof value;
  }
  return { code: "ERR_USER_CODE", name: "Error", message: `Uncaught ${shown}`, fields: { thrown: value } };
}

/**
 * A copy of `value` whose own data properties can be redefined, when it is an Error. isolated-vm's
 * copy of an error thrown out of a module's evaluation (top-level await, or a module with imports)
 * keeps its stack whatever is defined over it: cleanErrorStacks left the compiled module's lines
 * (`<guest>:3:7` for a one-line module). Accessors are not copied: nothing on the host is run.
 */
export function redefinableError(value: unknown): unknown {
  if (!(value instanceof Error)) return value;
  const copy = Object.create(Object.getPrototypeOf(value) as object) as Error;
  for (const key of Object.getOwnPropertyNames(value)) {
    const descriptor = Object.getOwnPropertyDescriptor(value, key);
    if (descriptor && "value" in descriptor)
      Object.defineProperty(copy, key, {
        value: descriptor.value,
        enumerable: descriptor.enumerable,
        writable: true,
        configurable: true,
      });
  }
  return copy;
}

/** What the caller sees of one guest stack (sanitized, at the caller's own lines). */
export type StackCleaner = (stack: string) => string;

/** The codec's tag for an Error in encoded text: without it, a decoded value holds no Error. */
export const ERROR_TAG = '"$":"e"';

/** Errors past this many objects of one value keep their stacks as they are (a bound on the walk). */
const MAX_OBJECTS_WALKED = 100_000;

/**
 * The lines of one stack the host cleans and remaps; the rest is cut, with a line saying how many.
 * A guest writes its errors' stacks itself: 700,000 lines of one held the host's event loop 0.65
 * s while they were read (QuickJS in process), where V8 writes 10 frames and at most a few
 * thousand with `Error.stackTraceLimit` raised.
 */
export const MAX_STACK_LINES = 2000;
/** The characters of stacks one value's walk cleans in all; the errors past them keep their header only. */
const MAX_STACK_CHARS_WALKED = 4 * 1024 * 1024;

/** `stack`'s first MAX_STACK_LINES lines, and a line that says how many more there were. */
export function boundedStack(stack: string): string {
  let end = -1;
  for (let i = 0; i < MAX_STACK_LINES; i++) {
    end = stack.indexOf("\n", end + 1);
    if (end < 0) return stack;
  }
  let more = 0;
  for (let at = end; at >= 0; at = stack.indexOf("\n", at + 1)) more++;
  return `${stack.slice(0, end)}\n    [cordon: ${more} more stack lines cut]`;
}

/**
 * Give every Error inside a decoded guest value (returned, exported, thrown, a cause, a field, a
 * Map's entry) the stack a caller may see: `clean`'s (guest frames only, mapped back to the lines
 * the caller wrote), with the `Name: message` header V8 writes and QuickJS does not. Before, only
 * a thrown error's own stack was cleaned; the others kept runtime frames (`<cordon>:2932:49`)
 * and the compiled module's lines (found by review). The value is the host's own decoded copy:
 * its errors' stacks are data properties the codec made.
 */
export function cleanErrorStacks(value: unknown, clean: StackCleaner): void {
  const seen = new Set<object>();
  const pending: unknown[] = [value];
  let budget = MAX_STACK_CHARS_WALKED;
  while (pending.length > 0 && seen.size < MAX_OBJECTS_WALKED) {
    const item = pending.pop();
    if (item === null || typeof item !== "object" || seen.has(item)) continue;
    seen.add(item);
    if (item instanceof Error) {
      const stack = Object.getOwnPropertyDescriptor(item, "stack")?.value;
      if (typeof stack === "string") {
        const bounded = budget > 0 ? boundedStack(stack) : "";
        budget -= bounded.length;
        let cleaned = bounded === "" ? "" : clean(bounded);
        if (cleaned === "" || /^\s+at /.test(cleaned)) cleaned = `${item.name}: ${item.message}${cleaned ? `\n${cleaned}` : ""}`;
        Object.defineProperty(item, "stack", { value: cleaned, writable: true, configurable: true });
      }
      const cause = Object.getOwnPropertyDescriptor(item, "cause")?.value;
      if (cause !== undefined) pending.push(cause);
      // An AggregateError's errors: not enumerable on the host's copy, so the walk below missed them.
      const errors = Object.getOwnPropertyDescriptor(item, "errors")?.value;
      if (errors !== undefined) pending.push(errors);
    }
    if (item instanceof Map) {
      for (const [key, entry] of item) pending.push(key, entry);
    } else if (item instanceof Set) {
      for (const entry of item) pending.push(entry);
    } else if (Array.isArray(item)) {
      for (let i = 0; i < item.length && pending.length + seen.size < MAX_OBJECTS_WALKED; i++) pending.push(item[i]);
    } else if (!ArrayBuffer.isView(item) && !(item instanceof Date)) {
      for (const key of Object.keys(item)) pending.push((item as Record<string, unknown>)[key]);
    }
  }
}
