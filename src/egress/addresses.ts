import { isIPv4, isIPv6 } from "node:net";
import ipaddr from "ipaddr.js";

/**
 * Address classification. An address is "public" or it is refused with a reason. The ranges are
 * IANA's special-purpose registries (iana-ipv4-special-registry, iana-ipv6-special-registry) plus
 * multicast, metadata services and the v6 forms that embed a v4 address. Every entry is refused,
 * including the few the registry marks "globally reachable" (anycast DNS sinks, PCP/TURN anycast):
 * a guest has no business with any of them, and refusing is the side to err on.
 */
export type AddressReason =
  | "invalid"
  | "unspecified"
  | "loopback"
  | "private"
  | "link-local"
  | "cgnat"
  | "metadata"
  | "unique-local"
  | "site-local"
  | "multicast"
  | "broadcast"
  | "documentation"
  | "benchmarking"
  | "discard"
  | "reserved"
  | "nat64"
  | "6to4"
  | "teredo"
  | "ipv4-mapped"
  | "ipv4-compatible";

/** The v6 forms that carry a v4 address; their refusals read `"<form>:<reason of the v4>"`. */
export type Embedding = "ipv4-mapped" | "ipv4-compatible" | "nat64" | "6to4" | "teredo";

export type AddressClass = "public" | AddressReason | `${Embedding}:${AddressReason}`;

type Range = readonly [cidr: string, reason: AddressReason, source: string];

// Cloud metadata endpoints sit inside link-local or CGNAT space (already refused); naming them
// makes the operator's log say what was attempted.
const METADATA: readonly Range[] = [
  ["169.254.169.254/32", "metadata", "AWS, GCP, Azure, OCI, DigitalOcean instance metadata"],
  ["169.254.170.2/32", "metadata", "AWS ECS task metadata"],
  ["100.100.100.200/32", "metadata", "Alibaba Cloud instance metadata"],
  ["168.63.129.16/32", "metadata", "Azure WireServer (a public address only meaningful inside Azure)"],
  ["fd00:ec2::254/128", "metadata", "AWS instance metadata over IPv6"],
];

const IPV4_RANGES: readonly Range[] = [
  ["0.0.0.0/8", "unspecified", "RFC 791 'this network' (0.0.0.0 reaches the local host on Linux)"],
  ["10.0.0.0/8", "private", "RFC 1918"],
  ["100.64.0.0/10", "cgnat", "RFC 6598 shared address space"],
  ["127.0.0.0/8", "loopback", "RFC 1122"],
  ["169.254.0.0/16", "link-local", "RFC 3927"],
  ["172.16.0.0/12", "private", "RFC 1918"],
  ["192.0.0.0/24", "reserved", "RFC 6890 IETF protocol assignments (DS-Lite, PCP/TURN anycast, NAT64 discovery)"],
  ["192.0.2.0/24", "documentation", "RFC 5737 TEST-NET-1"],
  ["192.31.196.0/24", "reserved", "RFC 7535 AS112-v4"],
  ["192.52.193.0/24", "reserved", "RFC 7450 AMT"],
  ["192.88.99.0/24", "reserved", "RFC 7526 deprecated 6to4 relay anycast"],
  ["192.168.0.0/16", "private", "RFC 1918"],
  ["192.175.48.0/24", "reserved", "RFC 7534 direct delegation AS112"],
  ["198.18.0.0/15", "benchmarking", "RFC 2544"],
  ["198.51.100.0/24", "documentation", "RFC 5737 TEST-NET-2"],
  ["203.0.113.0/24", "documentation", "RFC 5737 TEST-NET-3"],
  ["224.0.0.0/4", "multicast", "RFC 5771"],
  ["240.0.0.0/4", "reserved", "RFC 1112 class E"],
  ["255.255.255.255/32", "broadcast", "RFC 919 limited broadcast"],
];

// The v6 forms that embed a v4 address (::ffff:0:0/96, ::/96, 64:ff9b::/96, 2002::/16,
// 2001::/32) are handled in code before this table, since their verdict depends on the v4 inside.
const IPV6_RANGES: readonly Range[] = [
  ["::/128", "unspecified", "RFC 4291"],
  ["::1/128", "loopback", "RFC 4291"],
  ["::ffff:0:0:0/96", "reserved", "RFC 6145 IPv4-translated"],
  ["64:ff9b:1::/48", "nat64", "RFC 8215 local-use translation (the embedding is network-specific)"],
  ["100::/64", "discard", "RFC 6666 discard-only"],
  ["100:0:0:1::/64", "reserved", "RFC 9780 dummy prefix"],
  ["2001::/23", "reserved", "RFC 2928 IETF protocol assignments (PCP/TURN anycast, AMT, AS112, ORCHIDv2, DRIP)"],
  ["2001:2::/48", "benchmarking", "RFC 5180"],
  ["2001:db8::/32", "documentation", "RFC 3849"],
  ["2620:4f:8000::/48", "reserved", "RFC 7534 direct delegation AS112"],
  ["3fff::/20", "documentation", "RFC 9637"],
  ["5f00::/16", "reserved", "RFC 9602 SRv6 SIDs"],
  ["fc00::/7", "unique-local", "RFC 4193"],
  ["fe80::/10", "link-local", "RFC 4291"],
  ["fec0::/10", "site-local", "RFC 3879 deprecated site-local"],
  ["ff00::/8", "multicast", "RFC 4291"],
];

type Parsed<T> = { net: T; bits: number; reason: AddressReason };

// Longest prefix first, so a /32 metadata entry wins over the /16 around it.
function compile<T extends ipaddr.IPv4 | ipaddr.IPv6>(ranges: readonly Range[], kind: "ipv4" | "ipv6"): Parsed<T>[] {
  return ranges
    .map(([cidr, reason]) => {
      const [net, bits] = ipaddr.parseCIDR(cidr);
      return { net: net as T, bits, reason };
    })
    .filter((entry) => entry.net.kind() === kind)
    .sort((a, b) => b.bits - a.bits);
}

const V4 = compile<ipaddr.IPv4>([...METADATA, ...IPV4_RANGES], "ipv4");
const V6 = compile<ipaddr.IPv6>([...METADATA, ...IPV6_RANGES], "ipv6");
const GLOBAL_UNICAST = ipaddr.parseCIDR("2000::/3") as [ipaddr.IPv6, number];

/**
 * Parse any textual form of an address: dotted, decimal (`2130706433`), octal, hex and short
 * (`127.1`) IPv4 as WHATWG URL reads them, bracketed or bare IPv6, with or without a zone.
 * Returns null for anything that is not an address.
 */
export function parseAddress(text: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  let value = text;
  if (value.startsWith("[") && value.endsWith("]")) value = value.slice(1, -1);
  if (value.includes(":")) {
    // A URL writes a zone as %25; the address itself is what counts.
    const zone = value.indexOf("%");
    const bare = zone === -1 ? value : value.slice(0, zone);
    // inet_pton's grammar (a dotted tail must be plain decimal): the text a socket would accept.
    if (!isIPv6(bare)) return null;
    // Then URL's serializer writes it as eight hex groups: ipaddr.js alone would read the
    // deprecated `::a.b.c.d` as v4-mapped (`::ffff:a.b.c.d`), which is not what a socket reaches.
    try {
      return ipaddr.IPv6.parse(new URL(`http://[${bare}]/`).hostname.slice(1, -1));
    } catch {
      return null;
    }
  }
  if (isIPv4(value)) return ipaddr.IPv4.parse(value);
  // The legacy forms: let the URL parser (the one that reads the guest's URL) decide what they
  // mean, rather than a second parser that might disagree. The character check keeps the text
  // from being anything but a host.
  if (!/^[0-9a-fA-FxX.]+$/.test(value)) return null;
  try {
    const host = new URL(`http://${value}/`).hostname;
    return isIPv4(host) ? ipaddr.IPv4.parse(host) : null;
  } catch {
    return null;
  }
}

function v4FromParts(high: number, low: number): ipaddr.IPv4 {
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
}

function classifyV4(address: ipaddr.IPv4): AddressClass {
  for (const range of V4) if (address.match(range.net, range.bits)) return range.reason;
  // ipaddr.js keeps its own list; anything it knows and we do not is refused too.
  return address.range() === "unicast" ? "public" : "reserved";
}

function embedded(form: Embedding, inner: ipaddr.IPv4): AddressClass {
  const verdict = classifyV4(inner);
  return verdict === "public" ? "public" : `${form}:${verdict as AddressReason}`;
}

function classifyV6(address: ipaddr.IPv6): AddressClass {
  const p = address.parts;
  const zeros = (from: number, to: number) => p.slice(from, to).every((part) => part === 0);
  // ::ffff:a.b.c.d reaches a.b.c.d on a dual-stack socket.
  if (address.isIPv4MappedAddress()) return embedded("ipv4-mapped", address.toIPv4Address());
  // ::a.b.c.d (deprecated, RFC 4291 2.5.5.1); :: and ::1 fall through to the table.
  if (zeros(0, 6) && (p[6] !== 0 || p[7] > 1)) {
    const verdict = embedded("ipv4-compatible", v4FromParts(p[6], p[7]));
    return verdict === "public" ? "ipv4-compatible" : verdict;
  }
  // 64:ff9b::/96, RFC 6052: a NAT64 gateway forwards to the v4 address in the low 32 bits.
  if (p[0] === 0x64 && p[1] === 0xff9b && zeros(2, 6)) return embedded("nat64", v4FromParts(p[6], p[7]));
  // 2002::/16, RFC 3056: 6to4, the v4 address of the site's router in bits 16..47.
  if (p[0] === 0x2002) return embedded("6to4", v4FromParts(p[1], p[2]));
  // 2001::/32, RFC 4380: Teredo, the server's v4 in bits 32..63 and the client's, inverted, in 96..127.
  if (p[0] === 0x2001 && p[1] === 0) {
    const server = embedded("teredo", v4FromParts(p[2], p[3]));
    if (server !== "public") return server;
    return embedded("teredo", v4FromParts(p[6] ^ 0xffff, p[7] ^ 0xffff));
  }
  for (const range of V6) if (address.match(range.net, range.bits)) return range.reason;
  // Only 2000::/3 is allocated as global unicast; everything else is reserved by IETF.
  if (!address.match(GLOBAL_UNICAST)) return "reserved";
  return address.range() === "unicast" ? "public" : "reserved";
}

/**
 * Classify an address given in any textual form: `"public"`, or why it is refused. A v6 address
 * that embeds a v4 one is judged by the v4 inside (`"nat64:loopback"`); text that is not an
 * address is `"invalid"`.
 */
export function classifyAddress(ip: string): AddressClass {
  const address = parseAddress(ip);
  if (address === null) return "invalid";
  return address.kind() === "ipv4" ? classifyV4(address as ipaddr.IPv4) : classifyV6(address as ipaddr.IPv6);
}

/** The canonical text of an address (dotted v4, RFC 5952 v6 without zone), or null. */
export function canonicalAddress(ip: string): { address: string; family: 4 | 6 } | null {
  const parsed = parseAddress(ip);
  if (parsed === null) return null;
  return parsed.kind() === "ipv4"
    ? { address: parsed.toString(), family: 4 }
    : { address: (parsed as ipaddr.IPv6).toRFC5952String(), family: 6 };
}
