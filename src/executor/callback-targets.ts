import ipaddr from "ipaddr.js";

/**
 * Where this executor may call back for a remote run's bindings. Without a rule, an admitted
 * client could name any URL and have the executor POST to it (an SSRF through the executor's
 * network position). By default the executor calls back only to the address the request came
 * from, and to loopback only for a requester on loopback itself: a requester elsewhere could
 * otherwise reach the services listening on the executor's own loopback. `callbackOrigins` adds
 * exact origins (an app behind a proxy or NAT).
 */
export function createCallbackCheck(
  callbackOrigins: readonly string[] = [],
): (url: string, requester: string | undefined) => string | undefined {
  const origins = new Set(callbackOrigins.map((origin) => new URL(origin).origin));
  const refused = (origin: string) =>
    `callback.url: ${origin} is not allowed: this executor calls back to the requester's own address (loopback only for a requester on this machine), or an origin given with --callback-origin`;
  return (url, requester) => {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return "callback.url: not a URL";
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return "callback.url: must be http(s)";
    if (parsed.username || parsed.password) return "callback.url: must not carry credentials";
    if (origins.has(parsed.origin)) return undefined;
    const host = parsed.hostname.replace(/^\[|\]$/g, "");
    const from = requester !== undefined && ipaddr.isValid(requester) ? ipaddr.process(requester) : undefined;
    const local = from?.range() === "loopback";
    if (host === "localhost") return local ? undefined : refused(parsed.origin);
    if (!ipaddr.isValid(host)) return refused(parsed.origin);
    const target = ipaddr.process(host);
    if (target.range() === "loopback" && local) return undefined;
    if (from !== undefined && from.toString() === target.toString()) return undefined;
    return refused(parsed.origin);
  };
}
