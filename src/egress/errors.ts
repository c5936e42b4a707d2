/** Which check refused an egress request. */
export type EgressCheck =
  | "scheme"
  | "url"
  | "rule"
  | "headers"
  | "address"
  | "dns"
  | "redirect"
  | "request-too-large"
  | "response-too-large"
  | "response"
  | "timeout";

/**
 * Every refusal and every exceeded cap of the egress module. A TypeError, because that is what
 * `fetch` rejects with for a network failure, so guest code written against fetch handles it.
 * `code` is the design's stable code; `check` says which check refused, for the operator.
 */
export class EgressError extends TypeError {
  readonly code = "ERR_CAPABILITY_DENIED" as const;
  readonly check: EgressCheck;
  constructor(check: EgressCheck, message: string, options?: { cause?: unknown }) {
    super(`egress refused: ${message}`, options);
    this.name = "EgressError";
    this.check = check;
  }
}

/**
 * A fetch whose redirect mode is "error" met a redirect. Not a refusal (no rule or cap was
 * broken: the caller asked for it), so no ERR_CAPABILITY_DENIED: a TypeError, as Node's fetch
 * rejects with, whose message the brokered fetch passes on to the guest.
 */
export class RedirectModeError extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = "TypeError";
  }
}
