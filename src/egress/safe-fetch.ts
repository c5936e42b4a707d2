import { fetch as undiciFetch } from "undici";
import { cappedBody, readRequestBody } from "./body.js";
import { concealName, EgressError, RedirectModeError } from "./errors.js";
import { checkRawHeaders, dropBodyHeaders, dropCredentials, outgoingHeaders } from "./headers.js";
import { narrowAllowList } from "./narrow.js";
import { pinnedAgent } from "./pinned.js";
import { addressLiteral, createSystemResolve, type Resolve, type ResolvedAddress, resolveHost } from "./resolve.js";
import { type CompiledRules, compileRules, matchRule, type NetRule, normalizeMethod, routeOverrideRefusal } from "./rules.js";
import { isExempt, originOf, parseInternalOrigins, parseTarget } from "./target.js";
import { onAbort } from "../core/abort-listeners.js";

export interface SafeFetchOptions {
  /** The net rules of this grant (see rules.ts). With `allow`, narrowed by it first. */
  rules: readonly NetRule[];
  /** The deployment's ceiling. Absent: no ceiling, `rules` stand as written. */
  allow?: readonly string[];
  /**
   * Exact origins (`"http://127.0.0.1:8080"`, `"http://db.internal:5432"`) allowed to reach
   * special addresses (loopback, private, ...). Matches the URL's origin as written (host
   * normalized as rules are), never the address a name resolved to, another scheme or another
   * port. Rules still apply.
   */
  internalOrigins?: readonly string[];
  /** Resolve a name to all its addresses. Default: c-ares, A and AAAA. */
  resolve?: Resolve;
  /**
   * Redirects followed, each hop checked again. Default 0: the caller sees the 3xx. At most 20.
   * Applies to the redirect mode "follow" (the default); a request's `redirect: "manual"` gets the
   * 3xx and `"error"` rejects on it, as in Node's fetch.
   */
  maxRedirects?: number;
  /** Default 16 MiB. Checked before connecting. */
  maxRequestBytes?: number;
  /** Default 16 MiB, counted as the body streams (after decompression). */
  maxResponseBytes?: number;
  /** One deadline for the whole exchange: DNS, connect, every hop, the body read to its end. Default 30 s. */
  timeoutMs?: number;
  /** Cap of each DNS resolution inside the deadline. Default 5 s. */
  dnsTimeoutMs?: number;
}

export type SafeFetch = (input: Request | string | URL, init?: RequestInit) => Promise<Response>;

const MiB = 1024 * 1024;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

function integerOption(
  options: SafeFetchOptions,
  name: keyof SafeFetchOptions,
  fallback: number,
  min: number,
  max: number,
): number {
  const value = options[name];
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new TypeError(`${name} must be an integer from ${min} to ${max}`);
  }
  return value;
}

/** One request hop, after every check: what to send where. */
interface Hop {
  url: URL;
  method: string;
  headers: [string, string][];
  body: Uint8Array | null;
}

/**
 * A fetch that only reaches what its rules allow. Checks, in order, on the request and again on
 * every redirect hop: the scheme (http, https) → the WHATWG parse, no userinfo → the rules (host,
 * port, path, method) → DNS, every A and AAAA record classified, any special one refused unless
 * its origin is in `internalOrigins` → a connection to those checked addresses only (no second
 * resolution). Refusals throw an EgressError (`code: "ERR_CAPABILITY_DENIED"`, `check` says which).
 * Options are validated here; a bad one is a TypeError naming it.
 */
export function createSafeFetch(options: SafeFetchOptions): SafeFetch {
  if (options === null || typeof options !== "object") throw new TypeError("createSafeFetch needs an options object");
  if (options.allow !== undefined && (!Array.isArray(options.allow) || options.allow.some((rule) => typeof rule !== "string"))) {
    throw new TypeError("allow must be an array of string rules");
  }
  const ceiling: CompiledRules | null = options.allow === undefined ? null : compileRules(options.allow, "allow");
  let rules = compileRules(options.rules, "rules");
  if (options.allow !== undefined) rules = compileRules(narrowAllowList(options.allow, options.rules), "rules");
  const internal = parseInternalOrigins(options.internalOrigins);
  if (options.resolve !== undefined && typeof options.resolve !== "function") throw new TypeError("resolve must be a function");
  const maxRedirects = integerOption(options, "maxRedirects", 0, 0, 20);
  const maxRequestBytes = integerOption(options, "maxRequestBytes", 16 * MiB, 0, 2 ** 31);
  const maxResponseBytes = integerOption(options, "maxResponseBytes", 16 * MiB, 0, 2 ** 40);
  const timeoutMs = integerOption(options, "timeoutMs", 30_000, 1, 2 ** 31 - 1);
  const dnsTimeoutMs = integerOption(options, "dnsTimeoutMs", 5000, 1, 2 ** 31 - 1);
  const resolve = options.resolve ?? createSystemResolve({ timeoutMs: dnsTimeoutMs });

  /** `headers`: those to send (once known), which a rule with routes may refuse (routeOverrideRefusal). */
  function checkRules(url: URL, method: string, headers?: readonly [string, string][]): void {
    for (const list of ceiling === null ? [rules] : [ceiling, rules]) {
      const match = matchRule(list, url, method);
      if (!match.ok) throw new EgressError("rule", `${match.reason} (${method} ${originOf(url)})`);
      const refusal = headers === undefined ? undefined : routeOverrideRefusal(match.rule, headers);
      if (refusal !== undefined) throw new EgressError("rule", `${refusal} (${method} ${originOf(url)})`);
    }
  }

  /**
   * `signal`: the caller's (the run's end, the guest's abort), which cancels the lookup. Not the
   * exchange's own: its deadline is the lookup's too (`remainingMs`), and a lookup cut by it is a
   * DNS time-out (`check: "dns"`), whichever timer fires first.
   */
  async function checkAddresses(url: URL, remainingMs: number, signal: AbortSignal | undefined): Promise<ResolvedAddress[]> {
    const exempt = isExempt(internal, url);
    const literal = addressLiteral(url.hostname) !== null;
    // A name's failures read the same to a guest (concealName); an address literal's are its own.
    const forGuest = exempt || literal ? undefined : concealName(url.hostname, originOf(url));
    const addresses = await resolveHost(
      url.hostname,
      resolve,
      Math.max(1, Math.min(dnsTimeoutMs, remainingMs)),
      forGuest,
      signal,
    );
    for (const { address, verdict } of addresses) {
      if (verdict !== "public" && !exempt) {
        // A name's address is not given even to the operator: the message may reach a guest.
        const what = literal ? address : `"${url.hostname}" resolves to an address that`;
        throw new EgressError(
          "address",
          `${what} is ${verdict}, not a public address (${originOf(url)} is not in internalOrigins)`,
          { forGuest },
        );
      }
    }
    return addresses;
  }

  return async function safeFetch(input, init) {
    const raw = input instanceof Request ? input.url : input instanceof URL ? input.href : String(input);
    const url = parseTarget(raw);
    checkRawHeaders(init?.headers);
    // Refused before anything is built for the exchange (its Request, signal and deadline): a
    // guest looping over refused fetches cost the host ~0.5 ms each (the bridge bounds the count).
    const method = requestedMethod(input, init);
    if (method !== undefined) checkRules(url, method);
    const exchange = new Exchange(timeoutMs);
    try {
      // Request does fetch's normalization (method, headers, body) before any rule sees them.
      const request = new Request(input instanceof Request ? input : url.href, { duplex: "half", ...init } as RequestInit);
      const callerSignal = init?.signal ?? (input instanceof Request ? input.signal : undefined);
      exchange.follow(callerSignal);
      const signal = exchange.signal;
      const headers = outgoingHeaders(request.headers);
      checkRules(url, request.method, headers);
      let hop: Hop = {
        url,
        method: request.method,
        headers,
        body: await readRequestBody(request.body, maxRequestBytes, signal),
      };
      let from: URL | null = null;
      for (let hops = 0; ; hops++) {
        const addresses = await checkAddresses(hop.url, exchange.remaining(), callerSignal ?? undefined).catch(
          (error: unknown) => {
            if (from !== null && error instanceof EgressError) error.addContext(` (redirect from ${originOf(from)})`);
            throw error;
          },
        );
        if (signal.aborted) throw signal.reason;
        const response = await undiciFetch(hop.url.href, {
          method: hop.method,
          headers: hop.headers,
          body: hop.body,
          redirect: "manual",
          signal,
          dispatcher: exchange.connect(hop.url.hostname, addresses),
        });
        const location = response.headers.get("location");
        const redirect = REDIRECT_STATUSES.has(response.status);
        if (redirect && request.redirect === "error") {
          // As Node (undici) and Deno: any redirect status, with a Location or not.
          await response.body?.cancel().catch(() => {});
          throw unexpectedRedirect(hop, response.status, location);
        }
        // "manual": the 3xx as it came, and no hop to its Location (so nothing there to check).
        if (maxRedirects === 0 || !redirect || location === null || request.redirect === "manual") {
          return toResponse(response, hop, hops > 0, maxResponseBytes, (error) => exchange.finish(error));
        }
        await response.body?.cancel().catch(() => {});
        exchange.release(true);
        if (hops >= maxRedirects) throw new EgressError("redirect", `more than maxRedirects (${maxRedirects}) redirects`);
        let next: Hop;
        try {
          next = redirected(hop, parseTarget(location, hop.url), response.status);
          checkRules(next.url, next.method, next.headers);
        } catch (error) {
          if (error instanceof EgressError) error.addContext(` (redirect from ${originOf(hop.url)})`);
          throw error;
        }
        from = hop.url;
        hop = next;
      }
    } catch (error) {
      exchange.finish(error);
      // undici reports an abort as its own AbortError; the deadline's reason says more.
      if (exchange.expired && !(error instanceof EgressError) && (error as Error)?.name === "AbortError") {
        throw exchange.signal.reason;
      }
      // undici asserts a status of at least 100 where it refuses 1000 as a parse error: the
      // caller saw an internal assertion ("fetch failed (ERR_ASSERTION)").
      const cause = (error as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
      if (cause?.code === "ERR_ASSERTION" && String(cause.message).includes("statusCode")) {
        throw new EgressError("response", "the upstream answered a status below 100, which a Response cannot carry");
      }
      throw error;
    }
  };
}

/**
 * The method the Request made from `input` and `init` will carry (fetch's normalization of the
 * standard methods); undefined when only the Request can tell (a method that is not a string).
 */
function requestedMethod(input: Request | string | URL, init: RequestInit | undefined): string | undefined {
  const given = init?.method;
  if (given === undefined) return input instanceof Request ? input.method : "GET";
  return typeof given === "string" ? normalizeMethod(given) : undefined;
}

/** The state of one exchange across its hops: the single deadline and the current hop's agent. */
class Exchange {
  private readonly controller = new AbortController();
  private readonly started = Date.now();
  private readonly timer: NodeJS.Timeout;
  private agent: ReturnType<typeof pinnedAgent> | null = null;
  expired = false;

  constructor(private readonly timeoutMs: number) {
    this.timer = setTimeout(() => {
      this.expired = true;
      this.controller.abort(new EgressError("timeout", `the exchange took longer than timeoutMs (${timeoutMs} ms)`));
      // A caller that never reads the body still gets its connection closed.
      this.release(true);
    }, timeoutMs);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /**
   * End the exchange, its connection included, when the caller's signal aborts. A listener on
   * the caller's own signal, not AbortSignal.any or a Request's followed signal: under load Node
   * 20 collected those, and an aborted run's exchanges stayed open until their deadline.
   */
  follow(signal: AbortSignal | null | undefined): void {
    if (!signal) return;
    const abort = () => {
      this.controller.abort(signal.reason);
      this.release(true);
    };
    if (signal.aborted) {
      abort();
      return;
    }
    this.unfollow = onAbort(signal, abort);
  }

  private unfollow: (() => void) | undefined;

  remaining(): number {
    return Math.max(1, this.timeoutMs - (Date.now() - this.started));
  }

  /** The dispatcher of this hop: connections to the checked addresses only. */
  connect(hostname: string, addresses: readonly ResolvedAddress[]) {
    this.release(true);
    this.agent = pinnedAgent(hostname, addresses, this.remaining());
    return this.agent;
  }

  /** Let go of the hop's agent: gracefully once its exchange is done, at once after a failure. */
  release(abort: boolean): void {
    const agent = this.agent;
    this.agent = null;
    if (agent !== null) void (abort ? agent.destroy() : agent.close()).catch(() => {});
  }

  finish(error?: unknown): void {
    clearTimeout(this.timer);
    this.unfollow?.();
    this.release(error !== undefined);
  }
}

/** Why a fetch whose redirect mode is "error" rejected: a TypeError, as Node's fetch rejects with. */
function unexpectedRedirect(hop: Hop, status: number, location: string | null): TypeError {
  const to = location === null ? "" : ` to ${JSON.stringify(location)}`;
  const url = new URL(hop.url);
  url.hash = "";
  return new RedirectModeError(
    `fetch failed: ${hop.method} ${url.href} answered a ${status} redirect${to}, and the request's redirect mode is "error" (use "manual" to read the 3xx, or "follow")`,
  );
}

function redirectMethod(status: number, method: string): string {
  if (status === 303 && method !== "GET" && method !== "HEAD") return "GET";
  if ((status === 301 || status === 302) && method === "POST") return "GET";
  return method;
}

/** The next hop, per fetch's redirect rules: 303 (and 301/302 after POST) become a GET without body. */
function redirected(hop: Hop, next: URL, status: number): Hop {
  const method = redirectMethod(status, hop.method);
  let headers = hop.headers;
  let body = hop.body;
  if (method !== hop.method) {
    headers = dropBodyHeaders(headers);
    body = null;
  }
  if (next.origin !== hop.url.origin) headers = dropCredentials(headers);
  return { url: next, method, headers, body };
}

/**
 * The reason phrase as a Response can carry it (RFC 9110: HTAB, SP, VCHAR, obs-text), else "".
 * undici decodes the phrase as UTF-8, so an obs-text byte that is not UTF-8 (legal on the wire)
 * arrives as U+FFFD, which the Response constructor refuses as no ByteString. The phrase is
 * informational only (HTTP/2 has none): an empty one beats refusing the response.
 */
function reasonPhrase(text: string): string {
  return /^[\t\x20-\x7e\x80-\xff]*$/.test(text) ? text : "";
}

/**
 * Hand back a real `Response` (this Node's own class, the one `instanceof Response` sees) whose
 * body is counted against the cap as the caller reads it.
 */
function toResponse(
  response: Awaited<ReturnType<typeof undiciFetch>>,
  hop: Hop,
  wasRedirected: boolean,
  maxBytes: number,
  settle: (error?: unknown) => void,
): Response {
  const headers = new Headers();
  for (const [name, value] of response.headers) headers.append(name, value);
  const empty = response.body === null || NULL_BODY_STATUSES.has(response.status) || hop.method === "HEAD";
  if (empty) {
    void response.body?.cancel().catch(() => {});
    settle();
  }
  const body = empty ? null : cappedBody(response.body as ReadableStream<Uint8Array>, maxBytes, settle);
  let result: Response;
  try {
    result = new Response(body, { status: response.status, statusText: reasonPhrase(response.statusText), headers });
  } catch (error) {
    void body?.cancel().catch(() => {});
    // The constructor's RangeError is its status check (200 to 599); statusText was made safe above.
    if (error instanceof RangeError) {
      throw new EgressError("response", `the upstream answered status ${response.status}, which a Response cannot carry`);
    }
    throw error;
  }
  const url = new URL(hop.url);
  url.hash = "";
  Object.defineProperty(result, "url", { value: url.href });
  Object.defineProperty(result, "redirected", { value: wasRedirected });
  return result;
}
