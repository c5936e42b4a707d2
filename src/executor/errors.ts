/**
 * Service-level refusals: everything that is not a run result. Each is an HTTP status and a
 * stable code, sent as `{ error: { code, message } }`. Guest faults are never these: they are
 * 200 responses whose RunResult says `failed`.
 */
export const SERVICE_ERRORS = {
  ERR_BAD_REQUEST: 400,
  ERR_UNAUTHORIZED: 401,
  ERR_NOT_FOUND: 404,
  /** A remote host's prefix this executor no longer holds (evicted, idle, or the executor restarted). */
  ERR_PREFIX_GONE: 404,
  ERR_BODY_TOO_LARGE: 413,
  ERR_INTERNAL: 500,
  /** The bodies being uploaded to this executor already fill its buffer budget: retry later. */
  ERR_CAPACITY: 503,
  ERR_SHUTTING_DOWN: 503,
} as const;

export type ServiceErrorCode = keyof typeof SERVICE_ERRORS;
export type ServiceStatus = (typeof SERVICE_ERRORS)[ServiceErrorCode];

export class ServiceError extends Error {
  readonly status: ServiceStatus;

  constructor(
    readonly code: ServiceErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "ServiceError";
    this.status = SERVICE_ERRORS[code];
  }

  /** The response body. */
  toJSON(): { error: { code: ServiceErrorCode; message: string } } {
    return { error: { code: this.code, message: this.message } };
  }
}
