import { z } from "zod";
import { isValidGlobalName } from "../names.js";
import { checkModuleName } from "../core/options.js";
import { ABORT_REASON_CHARS, CLIENT_ID, type RemoteRequest } from "../core/protocol.js";
import { parseJsonBody } from "./body.js";
import { ServiceError } from "./errors.js";
import { scanJson } from "./json-scan.js";
import { MAX_COUNT, MAX_TIME_MS, shortened } from "../core/limits.js";
import { REQUEST_BOUNDS, checkProtoImport } from "./schema.js";

/**
 * The body of `POST /host` (the remote host's requests), exactly: unknown keys are refused at
 * every level. The client already normalized the source and encoded the values; the executor
 * checks shapes and sizes here and clamps the limits with its own policy afterwards.
 */
// Texts the client derived, bounded by the body cap (bytes, at least one a character) alone: the
// sandbox's 16 Mi characters count the caller's code, and the compiled form adds esbuild's helpers
// (it once also wrote each non-ASCII character as `\u4E00`, six: a 3 M-character CJK module the
// sandbox took was refused here as "Too big"). Values are escaped (a control character is 6), so
// neither has a character bound of its own.
const code = z.string();
const text = z.string();
// A line map is rows of numbers, or (as clients now send it) a source map's "mappings" text;
// its size is bounded by the body cap.
const lineMap = z.union([
  z.array(z.array(z.number().int().min(0))),
  z.strictObject({
    mappings: z.string().regex(/^[A-Za-z0-9+/,;]*$/),
    firstLineShift: z.number().int().min(0).max(1024).optional(),
  }),
]);

const source = z.strictObject({
  code,
  filename: z.string().min(1).max(REQUEST_BOUNDS.maxFilenameChars),
  wrapped: z.boolean(),
  lineMap,
  script: z.strictObject({ code, lineMap }).optional(),
});

// The bounds a sandbox's own options have (core/limits.ts): past 2**31-1 the guest runtime and
// v8's shared-memory calls, which hold counts and sizes as 32-bit integers, wrapped them.
const time = z.number().positive().max(MAX_TIME_MS);
const count = z.number().positive().max(MAX_COUNT);
const limits = z.strictObject({
  cpuTimeMs: time,
  wallTimeMs: time,
  memoryMb: count,
  maxOutputBytes: count,
  maxLogBytes: count,
  maxLogEntries: count,
  maxBridgeCalls: count,
  maxBridgeCallBytes: count,
});

const sourceImports = z
  .record(z.string().min(1).max(REQUEST_BOUNDS.maxSpecifierChars), code)
  .refine((imports) => Object.keys(imports).length <= REQUEST_BOUNDS.maxImports, {
    message: `at most ${REQUEST_BOUNDS.maxImports} imports`,
  });

const callback = z.strictObject({
  url: z.string().url().max(2048),
  run: z.string().min(1).max(128),
  grant: z.string().min(1).max(8192),
  names: z.array(z.string().max(1024)).max(10_000),
});

const prefix = z.string().min(1).max(64);
const abortId = z.string().regex(CLIENT_ID, "an abort id is 1-64 letters, digits, _ or -");
const common = { engine: z.enum(["v8", "quickjs"]), callback: callback.optional() };

export const remoteRequestSchema = z.discriminatedUnion("t", [
  z.strictObject({
    ...common,
    t: z.literal("run"),
    source,
    sourceImports,
    bindingsText: text,
    inputText: text,
    limits,
    mode: z.enum(["run", "prepare", "call"]).optional(),
    abortable: z.boolean().optional(),
    abortId: abortId.optional(),
  }),
  z.strictObject({
    ...common,
    t: z.literal("prepare"),
    key: z.string().min(1).max(128),
    partitionKey: z.string().max(256).optional(),
    source,
    sourceImports,
    bindingsText: text,
    limits,
  }),
  z.strictObject({
    ...common,
    t: z.literal("prefix-run"),
    prefix,
    source,
    inputText: text,
    limits,
    abortable: z.boolean().optional(),
    abortId: abortId.optional(),
  }),
  z.strictObject({
    ...common,
    t: z.literal("prefix-call"),
    prefix,
    path: z.string().min(1).max(1024),
    argsText: text,
    limits,
    abortable: z.boolean().optional(),
    abortId: abortId.optional(),
  }),
  z.strictObject({ ...common, t: z.literal("prefix-dispose"), prefix }),
  z.strictObject({ ...common, t: z.literal("abort"), abortId, reason: z.string().max(ABORT_REASON_CHARS) }),
]);

/** Parse and check a `/host` body; a 400 naming the field otherwise. */
export function parseRemoteRequest(body: Buffer): RemoteRequest {
  // Values: room for line maps sent as rows of numbers (older clients); members: the fixed fields,
  // 256 imports and 8 limits are a few hundred.
  const parsed = parseJsonBody(body, "a host request object", { values: 1_000_000, members: 10_000 });
  const checked = remoteRequestSchema.safeParse(parsed);
  if (!checked.success) {
    const issue = checked.error.issues[0];
    const path = shortened(issue.path.map(String).join("."), 200);
    throw new ServiceError("ERR_BAD_REQUEST", `${path || "body"}: ${shortened(issue.message, 300)}`);
  }
  const data = checked.data as RemoteRequest & { bindingsText?: string; inputText?: string; argsText?: string };
  if ("sourceImports" in data) {
    // zod's copy lacks an import named "__proto__" (checkProtoImport): the parsed object has it.
    const raw = (parsed as { sourceImports: Record<string, string> }).sourceImports;
    checkProtoImport(raw, "sourceImports", Number.POSITIVE_INFINITY);
    data.sourceImports = raw;
  }
  if (data.bindingsText !== undefined) checkBindingsText(data.bindingsText);
  // Read by the guest runtime: text it cannot read failed there, as the guest's own error.
  if (data.inputText !== undefined) checkEncoded(data.inputText, "inputText", "a value");
  if (data.argsText !== undefined) checkEncoded(data.argsText, "argsText", "an array");
  return data;
}

/**
 * One value in cordon's encoding (an array of arguments for `argsText`); a 400 naming the field
 * otherwise. Its JSON is checked by a scan, not decoded: the guest decodes it, once, under its
 * run's limits (src/executor/json-scan.ts). A well-formed text with a tag the guest cannot read
 * fails in the guest's decode, as the run's result.
 */
function checkEncoded(text: string, path: string, want: "a value" | "an array"): void {
  const kind = scanJson(text);
  if (kind === undefined) throw bad(path, `must be ${want} in cordon's encoding`);
  if (want === "an array" && kind !== "array") throw bad(path, "must be an array in cordon's encoding");
}

/**
 * The bindings descriptor is JSON the guest runtime reads and builds the guest's globals and host
 * modules from: its whole shape is checked here (a `null` descriptor was a TypeError inside a
 * worker, reported as the guest's own error), and global names as `globals` checks them.
 */
function checkBindingsText(bindingsText: string): void {
  let value: unknown;
  try {
    value = JSON.parse(bindingsText);
  } catch {
    throw bad("bindingsText", "must be a bindings descriptor (a JSON object)");
  }
  const top = plainObject(value, "bindingsText", ["globals", "modules", "fetch"]);
  if (top.fetch !== undefined && top.fetch !== null && !isIndex(top.fetch)) {
    throw bad("bindingsText.fetch", "must be a function number");
  }
  const globals = plainObject(top.globals ?? {}, "bindingsText.globals");
  for (const [name, desc] of Object.entries(globals)) {
    if (!isValidGlobalName(name)) {
      throw bad(`bindingsText.globals.${shortened(name)}`, "is not a valid global name (an identifier that shadows nothing)");
    }
    checkDesc(desc, `bindingsText.globals.${name}`, 0);
  }
  const modules = plainObject(top.modules ?? {}, "bindingsText.modules");
  for (const [specifier, desc] of Object.entries(modules)) {
    // As the client's own check of import names (checkModuleName), which the guest sees in errors.
    try {
      checkModuleName(specifier, "a module name", REQUEST_BOUNDS.maxSpecifierChars);
    } catch (error) {
      throw bad("bindingsText.modules", (error as Error).message.replace(/^cordon: /, ""));
    }
    checkDesc(desc, `bindingsText.modules[${JSON.stringify(shortened(specifier))}]`, 0);
  }
}

/** `{ f, n }` a host function, `{ d }` encoded data, `{ o }` an object of more (as Bindings makes them). */
function checkDesc(desc: unknown, path: string, depth: number): void {
  if (depth > MAX_DESC_DEPTH) throw bad(path, `nests more than ${MAX_DESC_DEPTH} levels`);
  const keys = desc !== null && typeof desc === "object" ? Object.keys(desc) : [];
  const d = desc as Record<string, unknown>;
  if (keys.length === 2 && "f" in d && "n" in d && isIndex(d.f) && typeof d.n === "string") return;
  if (keys.length === 1 && typeof d.d === "string") {
    if (scanJson(d.d) !== undefined) return;
    throw bad(path, "holds data that is not cordon's encoding");
  }
  if (keys.length === 1 && "o" in d) {
    const members = plainObject(d.o, `${path}.o`);
    for (const [key, member] of Object.entries(members)) checkDesc(member, `${path}.${shortened(key)}`, depth + 1);
    return;
  }
  throw bad(path, "must be { f, n } (a host function), { d } (data) or { o } (an object of them)");
}

/** Bindings nest objects 8 levels deep at most (Bindings' describeValue). */
const MAX_DESC_DEPTH = 9;

function plainObject(value: unknown, path: string, keys?: string[]): Record<string, unknown> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw bad(path, "must be a JSON object");
  const extra = keys && Object.keys(value).find((key) => !keys.includes(key));
  if (extra !== undefined) throw bad(`${path}.${shortened(extra)}`, "is not part of a bindings descriptor");
  return value as Record<string, unknown>;
}

function isIndex(value: unknown): boolean {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

function bad(path: string, message: string): ServiceError {
  return new ServiceError("ERR_BAD_REQUEST", `${path}: ${message}`);
}
