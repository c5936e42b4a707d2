/**
 * The shape of each frame a Deno process sends. The process is the guest's: its frames leave on
 * a FIFO guest code cannot open (process.ts), but the bootstrap that writes them shares the
 * guest's realm, so a frame may still be forged. Every field is checked before it
 * is read: a field that was an object with a non-callable `toString` threw inside the pipe's
 * data handler and ended the host process.
 */

type FieldKind = "string" | "integer" | "number" | "any";

/** Required fields by frame type; `?` marks an optional one. `work` is optional on every frame. */
const FRAMES: Record<string, Record<string, FieldKind>> = {
  reply: { seq: "integer", "value?": "any" },
  log: { level: "string", message: "string", "index?": "integer" },
  call: { callId: "integer", fnId: "integer", argsText: "string" },
  timer: { timerId: "integer", ms: "number" },
  done: { kind: "string", text: "string", "index?": "integer" },
  dirty: {},
  threw: { "code?": "string", "message?": "string", "text?": "string" },
};

function fits(value: unknown, kind: FieldKind): boolean {
  if (kind === "any") return true;
  if (kind === "string") return typeof value === "string";
  if (kind === "integer") return Number.isSafeInteger(value);
  return typeof value === "number" && !Number.isNaN(value);
}

/** What is wrong with `message`, or undefined when it is a frame the host reads. */
export function frameProblem(message: Record<string, unknown>): string | undefined {
  const type = message.t;
  if (typeof type !== "string" || !Object.hasOwn(FRAMES, type)) {
    return `an unknown frame ${typeof type === "string" ? JSON.stringify(type.slice(0, 40)) : `(t: ${typeof type})`}`;
  }
  if (message.work !== undefined && !Number.isSafeInteger(message.work)) return `a "${type}" frame's work is not an integer`;
  for (const [spec, kind] of Object.entries(FRAMES[type])) {
    const optional = spec.endsWith("?");
    const name = optional ? spec.slice(0, -1) : spec;
    const value = message[name];
    if (value === undefined && optional) continue;
    if (!fits(value, kind)) return `a "${type}" frame's ${name} is not ${kind === "integer" ? "an integer" : `a ${kind}`}`;
  }
  return undefined;
}
