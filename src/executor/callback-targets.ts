import ipaddr from "ipaddr.js";

/**
 * Where this executor may call back for a remote run's bindings. Without a rule, an admitted
 * client could name any URL and have the executor POST to it (an SSRF through the executor's
 * network position). By default the executor calls back only to the address the request came
 * from, or to loopback; `callbackOrigins` adds exact origins (an app behind a proxy or NAT).
 */
export function createCallbackCheck(
  callbackOrigins: readonly string[] = [],
): (url: string, requester: string | undefined) => string | undefined {
  const origins = new Set(callbackOrigins.map((origin) => new URL(origin).origin));
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
    if (host === "localhost") return undefined;
    if (!ipaddr.isValid(host)) {
      return `callback.url: ${parsed.origin} is not allowed: this executor calls back to the requester's own address, loopback, or an origin given with --callback-origin`;
    }
    const target = ipaddr.process(host);
    if (target.range() === "loopback") return undefined;
    if (requester && ipaddr.isValid(requester) && ipaddr.process(requester).toString() === target.toString()) return undefined;
    return `callback.url: ${parsed.origin} is not allowed: this executor calls back to the requester's own address, loopback, or an origin given with --callback-origin`;
  };
}
