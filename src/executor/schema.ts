import { z } from "zod";
import { shortened } from "../core/limits.js";
import { isValidExportPath } from "../names.js";
import { parseJsonBody } from "./body.js";
import { ServiceError } from "./errors.js";

/** Bounds of a run request beyond the body cap (which bounds the bytes, not the work). */
export const REQUEST_BOUNDS = {
  /** Characters of `code` and of each import's source: the sandbox's own maximum. */
  maxCodeChars: 16 * 1024 * 1024,
  maxFilenameChars: 256,
  maxImports: 256,
  maxSpecifierChars: 512,
  /** Nesting of `input`: `[[1]]` is 2 levels. */
  maxInputDepth: 64,
  /** Values in `input`, containers and leaves alike. */
  maxInputValues: 100_000,
} as const;

const limit = z.number().positive().max(Number.MAX_SAFE_INTEGER);

/** `limits` of a run: every key optional, each a positive number; unknown keys are refused. */
const limitsSchema = z.strictObject({
  cpuTimeMs: limit.optional(),
  wallTimeMs: limit.optional(),
  memoryMb: limit.optional(),
  maxOutputBytes: limit.optional(),
  maxLogBytes: limit.optional(),
  maxLogEntries: limit.optional(),
  maxBridgeCalls: limit.optional(),
  maxBridgeCallBytes: limit.optional(),
});

/**
 * The body of `POST /run`, exactly: unknown keys are refused at every level. `input` is any JSON
 * value, bounded separately (`checkInputBounds`) without recursion. `imports` holds source-text
 * modules only: host modules are functions, and functions do not travel over HTTP.
 */
/** `call` of a run: an export path of the module and its arguments (JSON), instead of `input`. */
const callSchema = z.strictObject({
  export: z
    .string()
    .refine(isValidExportPath, { message: 'must be a dotted export path such as "default" or "handlers.onEvent"' }),
  args: z.array(z.unknown()).optional(),
});

export const runRequestSchema = z.strictObject({
  code: z.string().max(REQUEST_BOUNDS.maxCodeChars),
  input: z.unknown().optional(),
  call: callSchema.optional(),
  filename: z.string().min(1).max(REQUEST_BOUNDS.maxFilenameChars).optional(),
  limits: limitsSchema.optional(),
  /** Tenants that must never share a warm instance (or its module state) name themselves here. */
  partitionKey: z.string().min(1).max(256).optional(),
  imports: z
    .record(z.string().min(1).max(REQUEST_BOUNDS.maxSpecifierChars), z.string().max(REQUEST_BOUNDS.maxCodeChars))
    .refine((imports) => Object.keys(imports).length <= REQUEST_BOUNDS.maxImports, {
      message: `at most ${REQUEST_BOUNDS.maxImports} imports`,
    })
    .optional(),
});

export type RunRequest = z.infer<typeof runRequestSchema>;

/**
 * Parse and check a body. Throws a 400 ServiceError whose message names the field. The value
 * returned is the parsed JSON itself, not zod's copy: JSON.parse keeps an own `__proto__` key as
 * data, and the sandbox's codec carries it as data (a copy made by assignment would not).
 */
export function parseRunRequest(body: Buffer): RunRequest {
  // input or call.args (one of them) and at most 256 imports, a few fields and limits besides.
  const parsed = parseJsonBody(body, "a run request object", { values: REQUEST_BOUNDS.maxInputValues + 1_000 });
  const checked = runRequestSchema.safeParse(parsed);
  if (!checked.success) throw new ServiceError("ERR_BAD_REQUEST", describeIssue(checked.error.issues[0]));
  const request = parsed as RunRequest;
  checkProtoImport(request.imports, "imports", REQUEST_BOUNDS.maxCodeChars);
  if ("input" in request && request.call) throw new ServiceError("ERR_BAD_REQUEST", "a run takes input or call, not both");
  if ("input" in request) checkInputBounds(request.input, "input");
  if (request.call?.args) checkInputBounds(request.call.args, "call.args");
  return request;
}

/**
 * zod's `record` neither checks nor copies a key named "__proto__", which JSON.parse makes an own
 * key like any other and the sandbox keeps as a module of that name: such an import is checked
 * here, by the record's own rule for its value (source text), and the request keeps JSON.parse's
 * object. Without the check a "__proto__" import could have been any JSON value, of any size.
 */
export function checkProtoImport(imports: unknown, path: string, maxChars: number): void {
  if (imports === null || typeof imports !== "object") return;
  const own = Object.getOwnPropertyDescriptor(imports, "__proto__");
  if (own === undefined) return;
  const text = own.value;
  if (typeof text !== "string") {
    throw new ServiceError(
      "ERR_BAD_REQUEST",
      `${path}.__proto__: Invalid input: expected string, received ${text === null ? "null" : Array.isArray(text) ? "array" : typeof text}`,
    );
  }
  if (text.length > maxChars)
    throw new ServiceError("ERR_BAD_REQUEST", `${path}.__proto__: Too big: expected string to have <=${maxChars} characters`);
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const path = shortened(issue.path.map(String).join("."));
  if (issue.code === "unrecognized_keys") {
    const where = path ? `${path}.` : "";
    // At most ten, each shortened: a body of a million unknown keys got its keys back as a 19 MB refusal.
    const keys = issue.keys.slice(0, 10).map((key) => `${where}${shortened(key)}`);
    const more = issue.keys.length > 10 ? ` and ${issue.keys.length - 10} more` : "";
    return `${keys.join(", ")}${more}: unknown ${issue.keys.length === 1 ? "field" : "fields"}; allowed: ${allowedAt(path)}`;
  }
  return `${path || "body"}: ${shortened(issue.message, 300)}`;
}

function allowedAt(path: string): string {
  const shape = path === "limits" ? limitsSchema.shape : path === "call" ? callSchema.shape : runRequestSchema.shape;
  return Object.keys(shape).join(", ");
}

/** Depth and size of `input`, walked with an explicit stack: a deep value cannot overflow ours. */
export function checkInputBounds(input: unknown, name: string): void {
  const { maxInputDepth, maxInputValues } = REQUEST_BOUNDS;
  const stack: { value: object; depth: number }[] = [];
  let values = 1;
  if (input !== null && typeof input === "object") stack.push({ value: input, depth: 1 });
  while (stack.length > 0) {
    const { value, depth } = stack.pop()!;
    if (depth > maxInputDepth) throw new ServiceError("ERR_BAD_REQUEST", `${name}: nested deeper than ${maxInputDepth} levels`);
    const children: unknown[] = Array.isArray(value) ? value : Object.values(value);
    // Counted before anything is pushed: a huge flat array is refused without walking it.
    values += children.length;
    if (values > maxInputValues) throw new ServiceError("ERR_BAD_REQUEST", `${name}: more than ${maxInputValues} values`);
    for (const child of children) {
      if (child !== null && typeof child === "object") stack.push({ value: child, depth: depth + 1 });
    }
  }
}
