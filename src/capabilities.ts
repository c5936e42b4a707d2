import { Resolver } from "node:dns";
import type { BodyReading } from "./core/answer-gate.js";
import { BRIDGE_BYTES_PER_BODY_BYTE, type ResolvedLimits } from "./core/limits.js";
import { checkKnownKeys, checkObject } from "./core/options.js";
import { takeBody } from "./core/fetch-wire.js";
import { RedirectModeError } from "./egress/errors.js";
import { Slots } from "./core/slots.js";
import type { NetRule, SandboxPolicy } from "./core/types.js";

/**
 * The run's brokered fetch, as the guest's `fetch` global calls it on the host. `signal` aborts
 * when the guest aborts the fetch or the run or call that asked has ended: its exchange ends with
 * it. `reading`: the response body counts in the run's AnswerGate as it arrives.
 */
export type BrokeredFetch = (request: Request, signal?: AbortSignal, reading?: BodyReading) => Promise<Response>;

/**
 * Exchanges in flight per run or prefix; more wait their turn. Each may buffer a response of up
 * to its byte cap on the host: 250 at once (the host-call cap) held gigabytes of the host's
 * memory for one 128 MB guest.
 */
const MAX_FETCHES_IN_FLIGHT = 16;

/**
 * Turn a run's (or prefix's) `capabilities` into its brokered fetch: the egress module with the
 * run's rules, narrowed by the policy's ceiling, and one deadline (the run's wall time). No net
 * rule, no fetch. Misconfiguration (a malformed rule, `"*"` the policy does not permit) throws.
 */
export async function brokeredFetch(
  capabilities: unknown,
  policy: SandboxPolicy,
  limits: ResolvedLimits,
): Promise<BrokeredFetch | undefined> {
  if (capabilities === undefined) return undefined;
  checkObject(capabilities, "capabilities");
  checkKnownKeys(capabilities, ["net", "import"], "capabilities");
  checkImportHosts(capabilities.import);
  const net = capabilities.net as NetRule[] | undefined;
  if (net === undefined) return undefined;
  const egress = await import("./egress/index.js");
  const rules = egress.compileRules(net, "capabilities.net");
  if (net.length === 0) return undefined;
  const ceiling = policy.net?.allow;
  // Any rule whose host is "*" ("*", "*:8080", { host: "*" }), not only the string "*".
  const anyHost = (compiled: { compiled: readonly { host: { kind: string } }[] }) =>
    compiled.compiled.some((rule) => rule.host.kind === "any");
  if (anyHost(rules) && !(ceiling && anyHost(egress.compileRules(ceiling, "policy.net.allow")))) {
    throw new TypeError('cordon: capabilities.net asks for any host ("*"), which policy.net.allow does not permit');
  }
  const safeFetch = egress.createSafeFetch({
    rules: net,
    allow: ceiling,
    internalOrigins: policy.net?.internalOrigins,
    resolve: await egressResolve(policy),
    maxRedirects: policy.net?.maxRedirects,
    timeoutMs: Math.ceil(limits.wallTimeMs),
    // A response must fit one host call once encoded (base64 and framing add about a third): past
    // this it is refused as a catchable error instead of ending the run at the bridge's cap.
    maxResponseBytes: Math.floor(limits.maxBridgeCallBytes / BRIDGE_BYTES_PER_BODY_BYTE),
    // The guest's fetch refuses a larger body before it crosses, with this same refusal (runtime.ts).
    maxRequestBytes: Math.floor(limits.maxBridgeCallBytes / BRIDGE_BYTES_PER_BODY_BYTE),
  });
  const maxBridgeCallBytes = limits.maxBridgeCallBytes;
  // The whole Response must fit the host call that carries it, headers included: encoded, its
  // headers, status text and URL are JSON, its body base64, plus the wire's tags (~80 characters).
  const checkFits = (response: Response, bodyBytes: number) => {
    const size =
      JSON.stringify([...response.headers]).length +
      JSON.stringify(response.statusText).length +
      JSON.stringify(response.url).length +
      Math.ceil(bodyBytes / 3) * 4 +
      256;
    if (size > maxBridgeCallBytes) {
      throw new egress.EgressError(
        "response-too-large",
        `the response (headers and body) is larger than one host call carries (maxBridgeCallBytes ${maxBridgeCallBytes})`,
      );
    }
  };
  const inFlight = new Slots(MAX_FETCHES_IN_FLIGHT, Number.POSITIVE_INFINITY);
  return async (request, signal, reading) => {
    // A fetch aborted (or a run ended) before or while it waits its turn never starts.
    if (signal?.aborted || !(await inFlight.acquire(signal))) throw new TypeError("fetch aborted");
    try {
      const response = await safeFetch(request, signal ? { signal } : undefined);
      // The body is read here, inside the mapping below: a body over its cap or cut short is a
      // refusal or a network failure like any other, not an internal error.
      try {
        checkFits(response, 0);
      } catch (error) {
        await response.body?.cancel().catch(() => {});
        throw error;
      }
      const body = await takeBody(response, reading?.chunk);
      checkFits(response, body?.byteLength ?? 0);
      return response;
    } catch (error) {
      // The guest gets a plain TypeError it can catch, with the code and the check that refused.
      // Where the detail would map the host's network for the guest, what it is shown instead.
      if (error instanceof egress.EgressError) {
        const shown = error.forGuest ?? error;
        throw Object.assign(new TypeError(shown.message), { code: error.code, check: shown.check });
      }
      if (signal?.aborted) throw new TypeError("fetch aborted");
      // redirect: "error" met a redirect: the guest asked for this rejection, and its message is the guest's own URL.
      if (error instanceof RedirectModeError) throw new TypeError(error.message);
      // Network failures cross as a TypeError with the failure's code and no host internals.
      const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
      throw new TypeError(`fetch failed${typeof cause?.code === "string" ? ` (${cause.code})` : ""}`);
    } finally {
      inFlight.release();
    }
  };
}

/** `capabilities.import`: hosts (`"esm.sh"`, `"example.com:8443"`) the deno engine may import remote modules from. */
function checkImportHosts(hosts: unknown): void {
  if (hosts === undefined) return;
  if (!Array.isArray(hosts) || hosts.some((h) => typeof h !== "string" || !/^[a-z0-9.-]+(?::\d{1,5})?$/i.test(h))) {
    throw new TypeError(
      'cordon: capabilities.import must be an array of host names, optionally with a port ("esm.sh", "example.com:8443")',
    );
  }
}

/**
 * The deno engine's `--allow-import` hosts for `capabilities.import`: never a special-purpose
 * address or localhost, and narrowed by `policy.net.allow` like net rules (see importAllowList).
 * undefined: the run asked for none.
 */
export async function importHosts(capabilities: unknown, policy: SandboxPolicy): Promise<string[] | undefined> {
  const hosts = (capabilities as { import?: unknown } | undefined)?.import;
  if (hosts === undefined) return undefined;
  checkImportHosts(hosts);
  const egress = await import("./egress/index.js");
  return egress.importAllowList(policy.net?.allow ?? null, hosts as string[]);
}

/** The egress's resolver: c-ares against `policy.net.dnsServers` when given; undefined: the system's servers. */
export async function egressResolve(policy: SandboxPolicy): Promise<import("./egress/index.js").Resolve | undefined> {
  const servers = policy.net?.dnsServers;
  if (servers === undefined) return undefined;
  const egress = await import("./egress/index.js");
  return egress.createSystemResolve({ servers });
}

/** Check `policy.net` up front: a malformed ceiling or origin is misconfiguration. */
export async function checkNetPolicy(net: unknown): Promise<void> {
  if (net === undefined) return;
  checkObject(net, "policy.net");
  checkKnownKeys(net, ["allow", "internalOrigins", "maxRedirects", "dnsServers"], "policy.net");
  if (net.dnsServers !== undefined) checkDnsServers(net.dnsServers);
  if (
    net.maxRedirects !== undefined &&
    (!Number.isInteger(net.maxRedirects) || (net.maxRedirects as number) < 0 || (net.maxRedirects as number) > 20)
  ) {
    throw new TypeError("cordon: policy.net.maxRedirects must be an integer from 0 to 20");
  }
  if (net.allow !== undefined) {
    const egress = await import("./egress/index.js");
    if (!Array.isArray(net.allow) || net.allow.some((r) => typeof r !== "string")) {
      throw new TypeError("cordon: policy.net.allow must be an array of string rules");
    }
    egress.compileRules(net.allow, "policy.net.allow");
  }
  if (net.internalOrigins !== undefined) {
    if (!Array.isArray(net.internalOrigins) || net.internalOrigins.some((o) => typeof o !== "string")) {
      throw new TypeError("cordon: policy.net.internalOrigins must be an array of origins (scheme://host:port)");
    }
  }
}

/** `policy.net.dnsServers`: addresses with an optional port (`"10.0.0.2"`, `"127.0.0.1:5353"`, `"[::1]:53"`), as c-ares takes them. */
function checkDnsServers(servers: unknown): void {
  const message =
    'cordon: policy.net.dnsServers must be a non-empty array of DNS server addresses ("10.0.0.2", "127.0.0.1:5353")';
  if (!Array.isArray(servers) || servers.length === 0 || servers.some((s) => typeof s !== "string")) throw new TypeError(message);
  try {
    new Resolver().setServers(servers as string[]);
  } catch (error) {
    throw new TypeError(`${message}: ${(error as Error).message}`);
  }
}
