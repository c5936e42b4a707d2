/** The stable error codes of the design. Callers switch on these strings. */
export const ERROR_CODES = [
  "ERR_COMPILE",
  "ERR_USER_CODE",
  "ERR_CPU_TIMEOUT",
  "ERR_WALL_TIMEOUT",
  "ERR_MEMORY_LIMIT",
  "ERR_ABORTED",
  "ERR_OUTPUT_TOO_LARGE",
  "ERR_NOT_SERIALIZABLE",
  "ERR_BRIDGE_CALL_LIMIT",
  "ERR_BRIDGE_PAYLOAD_TOO_LARGE",
  "ERR_CALL_TARGET_NOT_FOUND",
  "ERR_MODULE_NOT_FOUND",
  "ERR_CAPABILITY_DENIED",
  "ERR_QUEUE_FULL",
  "ERR_CAPACITY",
  "ERR_INSTANCE_RESET",
  "ERR_ENGINE_UNAVAILABLE",
  "ERR_EXECUTOR_UNREACHABLE",
  "ERR_INTERNAL",
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** Codes that mean "a limit fired": the instance that ran the guest is tainted and discarded. */
export const LIMIT_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "ERR_CPU_TIMEOUT",
  "ERR_WALL_TIMEOUT",
  "ERR_MEMORY_LIMIT",
  "ERR_ABORTED",
  "ERR_OUTPUT_TOO_LARGE",
  "ERR_BRIDGE_CALL_LIMIT",
  "ERR_BRIDGE_PAYLOAD_TOO_LARGE",
]);

/** The error shape every RunResult carries: plain data, safe to log and to serialize. */
export interface RunError {
  code: ErrorCode;
  name: string;
  message: string;
  stack?: string;
  /** Own enumerable fields of a guest error (e.g. `code`, `status`), decoded as data. */
  fields?: Record<string, unknown>;
}

/** A host-side error with a code from the design. Thrown only for misconfiguration. */
export class CordonError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CordonError";
    this.code = code;
  }
}

export function runError(code: ErrorCode, message: string, name = "CordonError"): RunError {
  return { code, name, message };
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && (ERROR_CODES as readonly string[]).includes(value);
}
