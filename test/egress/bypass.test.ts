import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createSafeFetch, type EgressCheck, type NetRule } from "../../src/egress/index.js";
import { guardConnections, type Listener, listen, refusal, tableResolver } from "./helpers.js";

/**
 * The bypass corpus. Every entry points at a real listener on 127.0.0.1 or ::1 (or at a metadata
 * address), with rules that allow the host unless the entry is about rules. Each must be refused
 * with ERR_CAPABILITY_DENIED, quickly, with no connection attempted (the connection guard sees
 * every socket undici would open) and none accepted by the listeners.
 */

let v4: Listener;
let v6: Listener;
let guard: ReturnType<typeof guardConnections>;

beforeAll(async () => {
  [v4, v6] = await Promise.all([listen("127.0.0.1"), listen("::1")]);
  guard = guardConnections();
});
afterAll(async () => {
  guard.restore();
  await Promise.all([v4.close(), v6.close()]);
});
afterEach(() => {
  guard.attempts.length = 0;
});

interface Attempt {
  name: string;
  /** `P4` and `P6` become the ports of the 127.0.0.1 and ::1 listeners. */
  url: string;
  check: EgressCheck;
  /** Default: any host on the listeners' ports and the default ports. */
  rules?: NetRule[];
  /** Names the injected resolver knows. */
  names?: Record<string, string[] | ((call: number) => string[])>;
  internalOrigins?: string[];
}

const ANY: NetRule[] = ["*", "*:P4", "*:P6"];
// Teredo: server 65.54.227.120 (public), client 127.0.0.1 (stored inverted: 80ff:fffe).
const TEREDO_CLIENT_LOOPBACK = "2001:0:4136:e378:8000:63bf:80ff:fffe";
// Teredo: server 10.0.0.1 (private).
const TEREDO_SERVER_PRIVATE = "2001:0:a00:1:8000:63bf:3fff:fdd2";

const corpus: Attempt[] = [
  // IPv4 loopback in every form WHATWG URL reads as 127.0.0.1
  { name: "dotted loopback", url: "http://127.0.0.1:P4/", check: "address" },
  { name: "decimal", url: "http://2130706433:P4/", check: "address" },
  { name: "octal", url: "http://0177.0.0.1:P4/", check: "address" },
  { name: "hex octets", url: "http://0x7f.0x0.0x0.0x1:P4/", check: "address" },
  { name: "hex integer", url: "http://0x7f000001:P4/", check: "address" },
  { name: "short form 127.1", url: "http://127.1:P4/", check: "address" },
  { name: "trailing dot on an address", url: "http://127.0.0.1.:P4/", check: "address" },
  { name: "another loopback address", url: "http://127.53.0.9:P4/", check: "address" },
  { name: "0.0.0.0", url: "http://0.0.0.0:P4/", check: "address" },
  { name: "0 (short for 0.0.0.0)", url: "http://0:P4/", check: "address" },
  // IPv6 loopback and unspecified
  { name: "[::1]", url: "http://[::1]:P6/", check: "address" },
  { name: "[::] (unspecified)", url: "http://[::]:P6/", check: "address" },
  { name: "[0:0:0:0:0:0:0:1] long form", url: "http://[0:0:0:0:0:0:0:1]:P6/", check: "address" },
  // v6 forms that embed 127.0.0.1
  { name: "v4-mapped dotted", url: "http://[::ffff:127.0.0.1]:P4/", check: "address" },
  { name: "v4-mapped hex", url: "http://[::ffff:7f00:1]:P4/", check: "address" },
  { name: "v4-mapped long form", url: "http://[0:0:0:0:0:ffff:127.0.0.1]:P4/", check: "address" },
  { name: "IPv4-compatible", url: "http://[::127.0.0.1]:P4/", check: "address" },
  { name: "IPv4-translated (RFC 6145)", url: "http://[::ffff:0:127.0.0.1]:P4/", check: "address" },
  { name: "NAT64", url: "http://[64:ff9b::7f00:1]:P4/", check: "address" },
  { name: "NAT64 dotted", url: "http://[64:ff9b::127.0.0.1]:P4/", check: "address" },
  { name: "6to4", url: "http://[2002:7f00:1::]:P4/", check: "address" },
  { name: "Teredo, loopback client", url: `http://[${TEREDO_CLIENT_LOOPBACK}]:P4/`, check: "address" },
  { name: "Teredo, private server", url: `http://[${TEREDO_SERVER_PRIVATE}]:P4/`, check: "address" },
  // Other special v6 space
  { name: "link-local with a zone", url: "http://[fe80::1%25lo]:P6/", check: "url" },
  { name: "link-local", url: "http://[fe80::1]:P6/", check: "address" },
  { name: "unique-local fd00::1", url: "http://[fd00::1]:P6/", check: "address" },
  { name: "unique-local fc00::1", url: "http://[fc00::1]:P6/", check: "address" },
  { name: "site-local", url: "http://[fec0::1]:P6/", check: "address" },
  { name: "multicast", url: "http://[ff02::1]:P6/", check: "address" },
  // Private, CGNAT, metadata
  { name: "RFC 1918", url: "http://10.0.0.1:P4/", check: "address" },
  { name: "CGNAT", url: "http://100.64.0.1:P4/", check: "address" },
  { name: "Alibaba metadata", url: "http://100.100.100.200/", check: "address" },
  { name: "metadata dotted", url: "http://169.254.169.254/latest/meta-data/", check: "address" },
  { name: "metadata decimal", url: "http://2852039166/", check: "address" },
  { name: "metadata hex", url: "http://0xa9fea9fe/", check: "address" },
  { name: "metadata octal", url: "http://0251.0376.0251.0376/", check: "address" },
  { name: "metadata short form", url: "http://169.254.43518/", check: "address" },
  { name: "metadata v4-mapped", url: "http://[::ffff:169.254.169.254]/", check: "address" },
  { name: "metadata v4-mapped hex", url: "http://[::ffff:a9fe:a9fe]/", check: "address" },
  { name: "metadata NAT64", url: "http://[64:ff9b::a9fe:a9fe]/", check: "address" },
  { name: "AWS IPv6 metadata", url: "http://[fd00:ec2::254]/", check: "address" },
  { name: "broadcast", url: "http://255.255.255.255/", check: "address" },
  // Names
  {
    name: "metadata.google.internal",
    url: "http://metadata.google.internal/computeMetadata/v1/",
    check: "address",
    names: { "metadata.google.internal": ["169.254.169.254"] },
  },
  { name: "metadata (bare name)", url: "http://metadata/", check: "address", names: { metadata: ["169.254.169.254"] } },
  { name: "localhost", url: "http://localhost:P4/", check: "address" },
  { name: "x.localhost", url: "http://x.localhost:P4/", check: "address" },
  { name: "LOCALHOST. (case, trailing dot)", url: "http://LOCALHOST.:P4/", check: "address" },
  {
    name: "one private record among public ones",
    url: "http://mixed.test:P4/",
    check: "address",
    names: { "mixed.test": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "127.0.0.1"] },
  },
  {
    name: "a name resolving to v4-mapped loopback",
    url: "http://mapped.test:P4/",
    check: "address",
    names: { "mapped.test": ["::ffff:127.0.0.1"] },
  },
  { name: "a resolver that fails", url: "http://nxdomain.test:P4/", check: "dns", names: {} },
  { name: "a resolver with no records", url: "http://empty.test:P4/", check: "dns", names: { "empty.test": [] } },
  {
    name: "a resolver answering garbage",
    url: "http://garbage.test:P4/",
    check: "dns",
    names: { "garbage.test": ["localhost"] },
  },
  // URL tricks
  { name: "userinfo", url: "http://allowed.test@127.0.0.1:P4/", check: "url", rules: ["allowed.test:P4"] },
  { name: "password only", url: "http://:secret@allowed.test:P4/", check: "url", rules: ["allowed.test:P4"] },
  {
    name: "backslash before @ (the host is allowed.test)",
    url: "http://allowed.test\\@127.0.0.1:P4/",
    check: "address",
    rules: ["allowed.test", "allowed.test:P4"],
    names: { "allowed.test": ["127.0.0.1"] },
  },
  {
    name: "fragment before @ (the host is 127.0.0.1)",
    url: "http://127.0.0.1:P4#@allowed.test",
    check: "rule",
    rules: ["allowed.test:P4"],
  },
  { name: "tab inside the host", url: "http://127.0.0\t.1:P4/", check: "address" },
  {
    name: "suffix lookalike of an allowed host",
    url: "http://allowed.test.evil.test:P4/",
    check: "rule",
    rules: ["allowed.test:P4"],
  },
  { name: "double trailing dot", url: "http://allowed.test..:P4/", check: "rule", rules: ["allowed.test:P4"] },
  { name: "apex of a wildcard", url: "http://allowed.test:P4/", check: "rule", rules: ["*.allowed.test:P4"] },
  // Ports
  {
    name: "a port outside the rule, even for an exempted origin",
    url: "http://allowed.test:P4/",
    check: "rule",
    rules: ["allowed.test"],
    names: { "allowed.test": ["127.0.0.1"] },
    internalOrigins: ["http://127.0.0.1:P4"],
  },
  { name: "http on 443 with a port-less rule", url: "http://allowed.test:443/", check: "rule", rules: ["allowed.test"] },
  { name: "another port of an allowed host:port", url: "http://allowed.test:P6/", check: "rule", rules: ["allowed.test:P4"] },
  // Schemes
  { name: "file: with an allowed host", url: "file://allowed.test/etc/passwd", check: "scheme", rules: ["allowed.test"] },
  { name: "file: spelled in capitals with spaces", url: "  FILE:///etc/passwd", check: "scheme" },
  { name: "ftp:", url: "ftp://allowed.test/", check: "scheme", rules: ["allowed.test"] },
  { name: "data:", url: "data:text/plain,hello", check: "scheme" },
  { name: "javascript:", url: "javascript:fetch('http://127.0.0.1/')", check: "scheme" },
  { name: "blob:", url: "blob:http://allowed.test/uuid", check: "scheme" },
  { name: "ws:", url: "ws://127.0.0.1:P4/", check: "scheme" },
  { name: "a scheme-relative URL", url: "//127.0.0.1:P4/", check: "scheme" },
  { name: "a scheme split by a tab", url: "fi\tle:///etc/passwd", check: "scheme" },
];

describe("the bypass corpus", () => {
  it("has at least 40 attempts", () => {
    expect(corpus.length).toBeGreaterThanOrEqual(40);
  });

  it.each(corpus)("refuses $name", async (attempt) => {
    const ports = (text: string) => text.replaceAll("P4", String(v4.port)).replaceAll("P6", String(v6.port));
    const { resolve, calls } = tableResolver(attempt.names ?? {});
    const safeFetch = createSafeFetch({
      rules: (attempt.rules ?? ANY).map((rule) => (typeof rule === "string" ? ports(rule) : rule)),
      internalOrigins: attempt.internalOrigins?.map(ports),
      resolve,
      timeoutMs: 2000,
    });
    const before = v4.connections + v6.connections;
    const { error, ms } = await refusal(safeFetch(ports(attempt.url)));
    expect(error.code).toBe("ERR_CAPABILITY_DENIED");
    expect(error.check).toBe(attempt.check);
    expect(error).toBeInstanceOf(TypeError);
    expect(ms).toBeLessThan(1000);
    expect(guard.attempts).toEqual([]);
    expect(v4.connections + v6.connections).toBe(before);
    // Rules are checked before DNS: a host outside them is never even resolved.
    if (attempt.check === "rule" || attempt.check === "scheme" || attempt.check === "url") expect(calls).toEqual([]);
  });
});

describe("DNS rebinding", () => {
  it("resolves once per request and connects only to the address it checked", async () => {
    // First answer public, every later one loopback: a check-then-resolve-again fetch would connect to 127.0.0.1.
    const { resolve, calls } = tableResolver({ "rebind.test": (call) => (call === 1 ? ["93.184.215.14"] : ["127.0.0.1"]) });
    const safeFetch = createSafeFetch({ rules: [`rebind.test:${v4.port}`], resolve, timeoutMs: 2000 });
    const before = v4.connections;
    // The guard stops the connection to the public address (tests never leave loopback), so the fetch fails.
    const error = await safeFetch(`http://rebind.test:${v4.port}/`).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect(calls).toEqual(["rebind.test"]);
    expect(guard.attempts).toMatchObject([{ host: "rebind.test", addresses: ["93.184.215.14"], blocked: true }]);
    expect(v4.connections).toBe(before);
  });

  it("refuses when the first answer is already private, without a second resolution", async () => {
    const { resolve, calls } = tableResolver({ "rebind.test": (call) => (call === 1 ? ["127.0.0.1"] : ["93.184.215.14"]) });
    const safeFetch = createSafeFetch({ rules: [`rebind.test:${v4.port}`], resolve });
    const { error } = await refusal(safeFetch(`http://rebind.test:${v4.port}/`));
    expect(error.check).toBe("address");
    // It says what kind of address, not which: the guest reads it (no oracle of internal DNS).
    expect(error.message).toContain("loopback");
    expect(error.message).not.toContain("127.0.0.1");
    expect(calls).toEqual(["rebind.test"]);
    expect(guard.attempts).toEqual([]);
  });
});
