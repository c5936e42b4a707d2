import { promises as dns } from "node:dns";
import { onAbort } from "../core/abort-listeners.js";
import { type AddressClass, canonicalAddress, classifyAddress } from "./addresses.js";
import { type EgressCheck, EgressError } from "./errors.js";

/**
 * Resolve a host name to every address it has (A and AAAA). Injectable for tests and operators.
 * `signal` aborts when the answer is no longer wanted (the exchange ended, or the deadline
 * passed): a resolver should stop its queries then; resolveHost stops waiting either way.
 */
export type Resolve = (host: string, signal?: AbortSignal) => Promise<string[]>;

export interface ResolvedAddress {
  /** Canonical text: dotted v4 or RFC 5952 v6. This exact address is what gets connected to. */
  address: string;
  family: 4 | 6;
  verdict: AddressClass;
}

const NO_RECORDS = new Set(["ENODATA", "ENOTFOUND", "NXDOMAIN"]);

/**
 * The default resolver: c-ares (`dns.Resolver`), A and AAAA queried together. Not `dns.lookup`:
 * getaddrinfo runs on libuv's small thread pool and cannot be cancelled, so guest-chosen slow
 * names could starve the host's file system work; c-ares queries time out and are cancelled.
 * It does not read /etc/hosts; inject `resolve` to reach names that only live there. `servers`
 * overrides the system's DNS servers (`"127.0.0.1:5353"`).
 */
export function createSystemResolve(options: { timeoutMs?: number; servers?: string[] } = {}): Resolve {
  const { timeoutMs = 5000, servers } = options;
  return async (host, signal) => {
    if (signal?.aborted) throw signal.reason;
    const resolver = new dns.Resolver({ timeout: Math.max(1, Math.min(timeoutMs, 5000)), tries: 2 });
    if (servers !== undefined) resolver.setServers(servers);
    const timer = setTimeout(() => resolver.cancel(), timeoutMs);
    // Cancelled, its queries end (ECANCELLED) and are not sent again.
    const stopWatching = signal ? onAbort(signal, () => resolver.cancel()) : undefined;
    try {
      const answers = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
      const addresses = answers.flatMap((answer) => (answer.status === "fulfilled" ? answer.value : []));
      // A real failure (timeout, refused, servfail) of either family fails the whole answer:
      // a half answer is not the name's full set of addresses.
      for (const answer of answers) {
        if (answer.status === "rejected" && !NO_RECORDS.has((answer.reason as NodeJS.ErrnoException).code ?? "")) {
          throw answer.reason;
        }
      }
      return addresses;
    } finally {
      clearTimeout(timer);
      stopWatching?.();
    }
  };
}

/** RFC 6761 6.3: `localhost` and its subdomains are loopback by definition; never ask DNS. */
export function isLocalhostName(host: string): boolean {
  return host === "localhost" || host.endsWith(".localhost");
}

/** The address a WHATWG URL hostname is written as, or null for a name. */
export function addressLiteral(hostname: string): string | null {
  const host = hostname.endsWith(".") ? hostname.slice(0, -1) : hostname;
  // URL writes an IPv6 host in brackets and every legacy IPv4 form as dotted decimal.
  if (host.startsWith("[")) return host.slice(1, -1);
  return /^[0-9.]+$/.test(host) ? host : null;
}

/**
 * Every address `hostname` (a WHATWG URL hostname) stands for, each classified. An address literal
 * is classified as written, never resolved. Fails closed: a resolver error, a timeout, an empty
 * answer or a record that is not an address is an EgressError (`check: "dns"`); all but the
 * timeout carry `forGuest` when given (EgressError.forGuest: what the name's failure shows a guest).
 * `signal`: the caller's (a fetch's: the run's end, the guest's abort; not the exchange's own
 * deadline, which `timeoutMs` already covers). When it aborts, the lookup ends with its reason and
 * its queries are cancelled: a run that started fetches to a name whose DNS never answers and returned kept
 * querying for up to the DNS timeout, holding its prefix's fetch slots (red team, 2026-12-05).
 */
export async function resolveHost(
  hostname: string,
  resolve: Resolve,
  timeoutMs: number,
  forGuest?: { check: EgressCheck; message: string },
  signal?: AbortSignal,
): Promise<ResolvedAddress[]> {
  const host = hostname.endsWith(".") ? hostname.slice(0, -1) : hostname;
  const ip = addressLiteral(host);
  let records: string[];
  if (ip !== null) records = [ip];
  else if (isLocalhostName(host)) records = ["127.0.0.1", "::1"];
  else {
    if (signal?.aborted) throw signal.reason;
    records = await lookUp(host, resolve, timeoutMs, forGuest, signal);
    if (!Array.isArray(records) || records.length === 0) {
      throw new EgressError("dns", `"${host}" has no A or AAAA records`, { forGuest });
    }
  }
  const seen = new Map<string, ResolvedAddress>();
  for (const record of records) {
    const canonical = typeof record === "string" ? canonicalAddress(record) : null;
    if (canonical === null) {
      throw new EgressError("dns", `resolving "${host}" answered ${JSON.stringify(record)}, not an address`, { forGuest });
    }
    if (!seen.has(canonical.address)) seen.set(canonical.address, { ...canonical, verdict: classifyAddress(canonical.address) });
  }
  return [...seen.values()];
}

/**
 * `resolve(host)` under a deadline and the caller's signal; whichever ends it first also aborts
 * the signal `resolve` was given, so its queries stop too.
 */
async function lookUp(
  host: string,
  resolve: Resolve,
  timeoutMs: number,
  forGuest: { check: EgressCheck; message: string } | undefined,
  signal: AbortSignal | undefined,
): Promise<string[]> {
  const lookup = new AbortController();
  let stopWatching: (() => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  const ended = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new EgressError("dns", `resolving "${host}" took longer than ${timeoutMs} ms`);
      reject(error);
      lookup.abort(error);
    }, timeoutMs);
    if (signal)
      stopWatching = onAbort(signal, () => {
        reject(signal.reason);
        lookup.abort(signal.reason);
      });
  });
  try {
    return await Promise.race([resolve(host, lookup.signal), ended]);
  } catch (error) {
    if (error instanceof EgressError || (signal?.aborted && error === signal.reason)) throw error;
    const detail = (error as NodeJS.ErrnoException)?.code ?? (error as Error)?.message ?? String(error);
    throw new EgressError("dns", `resolving "${host}" failed (${detail})`, { cause: error, forGuest });
  } finally {
    clearTimeout(timer);
    stopWatching?.();
  }
}
