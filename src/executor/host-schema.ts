import { z } from "zod";
import type { RemoteRequest } from "../core/protocol.js";
import { parseJsonBody } from "./body.js";
import { ServiceError } from "./errors.js";
import { shortened } from "../core/limits.js";
import { REQUEST_BOUNDS } from "./schema.js";

/**
 * The body of `POST /host` (the remote host's requests), exactly: unknown keys are refused at
 * every level. The client already normalized the source and encoded the values; the executor
 * checks shapes and sizes here and clamps the limits with its own policy afterwards.
 */
const code = z.string().max(REQUEST_BOUNDS.maxCodeChars);
const text = z.string().max(REQUEST_BOUNDS.maxCodeChars * 2);
// A line map is rows of numbers; its size is bounded by the body cap.
const lineMap = z.array(z.array(z.number().int().min(0)));

const source = z.strictObject({
  code,
  filename: z.string().min(1).max(REQUEST_BOUNDS.maxFilenameChars),
  wrapped: z.boolean(),
  lineMap,
  script: z.strictObject({ code, lineMap }).optional(),
});

const limit = z.number().positive().max(Number.MAX_SAFE_INTEGER);
const limits = z.strictObject({
  cpuTimeMs: limit,
  wallTimeMs: limit,
  memoryMb: limit,
  maxOutputBytes: limit,
  maxLogBytes: limit,
  maxLogEntries: limit,
  maxBridgeCalls: limit,
  maxBridgeCallBytes: limit,
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
  }),
  z.strictObject({
    ...common,
    t: z.literal("prefix-call"),
    prefix,
    path: z.string().min(1).max(1024),
    argsText: text,
    limits,
    abortable: z.boolean().optional(),
  }),
  z.strictObject({ ...common, t: z.literal("prefix-dispose"), prefix }),
]);

/** Parse and check a `/host` body; a 400 naming the field otherwise. */
export function parseRemoteRequest(body: Buffer): RemoteRequest {
  const parsed = parseJsonBody(body, "a host request object");
  const checked = remoteRequestSchema.safeParse(parsed);
  if (!checked.success) {
    const issue = checked.error.issues[0];
    const path = shortened(issue.path.map(String).join("."), 200);
    throw new ServiceError("ERR_BAD_REQUEST", `${path || "body"}: ${shortened(issue.message, 300)}`);
  }
  if (typeof (parsed as { bindingsText?: unknown }).bindingsText === "string")
    checkBindingsText((parsed as { bindingsText: string }).bindingsText);
  return checked.data as RemoteRequest;
}

/** The bindings descriptor is JSON the guest runtime reads: refuse anything else here, not in a worker. */
function checkBindingsText(bindingsText: string): void {
  try {
    const value = JSON.parse(bindingsText) as unknown;
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error();
  } catch {
    throw new ServiceError("ERR_BAD_REQUEST", "bindingsText: must be a bindings descriptor (a JSON object)");
  }
}
