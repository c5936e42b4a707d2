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
  /**
   * What a guest is shown instead, where `check` and `message` would tell it about the host's
   * network: a name that does not resolve and one that resolves to a private address read the
   * same to it (see concealName). The caller of createSafeFetch, the operator, keeps the detail.
   */
  readonly forGuest: { check: EgressCheck; message: string } | undefined;
  constructor(
    check: EgressCheck,
    message: string,
    options?: { cause?: unknown; forGuest?: { check: EgressCheck; message: string } },
  ) {
    super(`egress refused: ${message}`, options);
    this.name = "EgressError";
    this.check = check;
    this.forGuest = options?.forGuest && {
      check: options.forGuest.check,
      message: `egress refused: ${options.forGuest.message}`,
    };
  }

  /** Add where the refusal happened (a redirect's origin) to both messages. */
  addContext(text: string): void {
    this.message += text;
    if (this.forGuest) this.forGuest.message += text;
  }
}

/**
 * The same refusal for every way a name can fail to give a public address (no such name, no A or
 * AAAA records, a resolver's error, a record that is no address, a special-purpose address): told
 * apart, they let a guest allowed a wildcard (`"*"` for an agent browsing the web) map the host's
 * internal DNS — which names exist inside, and which range each resolves to.
 */
export function concealName(host: string, origin: string): { check: EgressCheck; message: string } {
  return {
    check: "address",
    message: `"${host}" has no public address: it does not resolve, or resolves to an address that is not public (${origin} is not in internalOrigins)`,
  };
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
