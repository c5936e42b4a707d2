import dgram from "node:dgram";
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSafeFetch, createSystemResolve, EgressError } from "../../src/egress/index.js";
import { resolveHost } from "../../src/egress/resolve.js";
import { echoOf, type Listener, listen, refusal, tableResolver } from "./helpers.js";

interface Zone {
  A?: string[];
  AAAA?: string[];
  /** Answer every query for the name with this DNS rcode (2 SERVFAIL, 3 NXDOMAIN). */
  rcode?: number;
  /** Only for this query type. */
  rcodeFor?: "A" | "AAAA";
  /** Never answer. */
  silent?: boolean;
}

/** A tiny authoritative DNS responder on 127.0.0.1 (UDP, A and AAAA only), for the real c-ares path. */
async function dnsServer(zones: Record<string, Zone>) {
  const socket = dgram.createSocket("udp4");
  const queries: string[] = [];
  socket.on("message", (query, peer) => {
    let offset = 12;
    const labels: string[] = [];
    while (query[offset] !== 0) {
      labels.push(query.subarray(offset + 1, offset + 1 + query[offset]).toString());
      offset += query[offset] + 1;
    }
    const questionEnd = offset + 5;
    const qtype = query.readUInt16BE(offset + 1) === 28 ? "AAAA" : "A";
    const name = labels.join(".").toLowerCase();
    queries.push(`${qtype} ${name}`);
    const zone = zones[name];
    if (zone?.silent) return;
    const rcode = zone === undefined ? 3 : zone.rcode !== undefined && (zone.rcodeFor ?? qtype) === qtype ? zone.rcode : 0;
    const records = rcode === 0 ? (zone?.[qtype] ?? []) : [];
    const header = Buffer.alloc(12);
    header.writeUInt16BE(query.readUInt16BE(0), 0);
    header.writeUInt16BE(0x8180 | rcode, 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(records.length, 6);
    const answers = records.map((address) => {
      const rdata = qtype === "A" ? Buffer.from(address.split(".").map(Number)) : ipv6Bytes(address);
      const answer = Buffer.alloc(12);
      answer.writeUInt16BE(0xc00c, 0);
      answer.writeUInt16BE(qtype === "A" ? 1 : 28, 2);
      answer.writeUInt16BE(1, 4);
      answer.writeUInt32BE(60, 6);
      answer.writeUInt16BE(rdata.length, 10);
      return Buffer.concat([answer, rdata]);
    });
    socket.send(Buffer.concat([header, query.subarray(12, questionEnd), ...answers]), peer.port, peer.address);
  });
  socket.bind(0, "127.0.0.1");
  await once(socket, "listening");
  return { server: `127.0.0.1:${socket.address().port}`, queries, close: () => socket.close() };
}

function ipv6Bytes(address: string): Buffer {
  const [head, tail = ""] = address.split("::");
  const parts = (text: string) => (text === "" ? [] : text.split(":").map((part) => Number.parseInt(part, 16)));
  const left = parts(head);
  const right = parts(tail);
  const all = [...left, ...new Array(8 - left.length - right.length).fill(0), ...right];
  const bytes = Buffer.alloc(16);
  for (const [i, part] of all.entries()) bytes.writeUInt16BE(part, i * 2);
  return bytes;
}

let dns: Awaited<ReturnType<typeof dnsServer>>;
let local: Listener;

beforeAll(async () => {
  local = await listen("127.0.0.1");
  dns = await dnsServer({
    "both.test": { A: ["93.184.215.14", "93.184.215.15"], AAAA: ["2606:2800:21f:cb07:6820:80da:af6b:8b2c"] },
    "v4.test": { A: ["93.184.215.14"] },
    "v6.test": { AAAA: ["2606:2800:21f:cb07::1"] },
    "servfail.test": { rcode: 2 },
    "half.test": { A: ["93.184.215.14"], rcode: 2, rcodeFor: "AAAA" },
    "empty.test": {},
    "silent.test": { silent: true },
    "local.test": { A: ["127.0.0.1"] },
  });
});
afterAll(async () => {
  dns.close();
  await local.close();
});

describe("the system resolver (c-ares against a local DNS server)", () => {
  const resolve = () => createSystemResolve({ servers: [dns.server], timeoutMs: 300 });

  it("returns every A and AAAA record", async () => {
    expect((await resolve()("both.test")).sort()).toEqual([
      "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
      "93.184.215.14",
      "93.184.215.15",
    ]);
    expect(await resolve()("v4.test")).toEqual(["93.184.215.14"]);
    expect(await resolve()("v6.test")).toEqual(["2606:2800:21f:cb07::1"]);
  });

  it("answers nothing for a name with no records, which resolveHost refuses", async () => {
    expect(await resolve()("empty.test")).toEqual([]);
    expect(await resolve()("nxdomain.test")).toEqual([]);
    await expect(resolveHost("empty.test", resolve(), 1000)).rejects.toMatchObject({ check: "dns", message: /no A or AAAA/ });
  });

  it("fails closed on a server failure, even of one family", async () => {
    await expect(resolve()("servfail.test")).rejects.toMatchObject({ code: "ESERVFAIL" });
    await expect(resolve()("half.test")).rejects.toMatchObject({ code: "ESERVFAIL" });
  });

  it("fails closed, quickly, when the server never answers", async () => {
    const started = performance.now();
    await expect(resolve()("silent.test")).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it("serves safeFetch end to end, one query per family", async () => {
    dns.queries.length = 0;
    const safeFetch = createSafeFetch({
      rules: [`local.test:${local.port}`],
      internalOrigins: [`http://local.test:${local.port}`],
      resolve: resolve(),
    });
    const seen = await echoOf(await safeFetch(`http://local.test:${local.port}/echo`));
    expect(seen.headers.host).toBe(`local.test:${local.port}`);
    expect(dns.queries.sort()).toEqual(["A local.test", "AAAA local.test"]);
    const denied = createSafeFetch({ rules: [`local.test:${local.port}`], resolve: resolve() });
    await expect(denied(`http://local.test:${local.port}/echo`)).rejects.toMatchObject({ check: "address" });
  });
});

describe("resolveHost", () => {
  it("classifies an address literal without resolving it", async () => {
    const { resolve, calls } = tableResolver({});
    expect(await resolveHost("127.0.0.1", resolve, 100)).toEqual([{ address: "127.0.0.1", family: 4, verdict: "loopback" }]);
    expect(await resolveHost("[::ffff:7f00:1]", resolve, 100)).toEqual([
      { address: "::ffff:7f00:1", family: 6, verdict: "ipv4-mapped:loopback" },
    ]);
    expect(await resolveHost("93.184.215.14", resolve, 100)).toMatchObject([{ verdict: "public" }]);
    expect(calls).toEqual([]);
  });

  it("treats localhost names as loopback without asking DNS (RFC 6761)", async () => {
    const { resolve, calls } = tableResolver({ localhost: ["93.184.215.14"] });
    expect(await resolveHost("localhost", resolve, 100)).toMatchObject([{ verdict: "loopback" }, { verdict: "loopback" }]);
    expect(await resolveHost("a.b.localhost.", resolve, 100)).toMatchObject([{ address: "127.0.0.1" }, { address: "::1" }]);
    expect(calls).toEqual([]);
  });

  it("classifies every record, canonical and without duplicates, and asks without the trailing dot", async () => {
    const { resolve, calls } = tableResolver({ "multi.test": ["93.184.215.14", "::FFFF:10.0.0.1", "93.184.215.14", "0x7f.1"] });
    expect(await resolveHost("multi.test.", resolve, 100)).toEqual([
      { address: "93.184.215.14", family: 4, verdict: "public" },
      { address: "::ffff:a00:1", family: 6, verdict: "ipv4-mapped:private" },
      { address: "127.0.0.1", family: 4, verdict: "loopback" },
    ]);
    expect(calls).toEqual(["multi.test"]);
  });

  it("fails closed: errors, empty answers, non-addresses and timeouts are refusals", async () => {
    const failing = async () => {
      throw Object.assign(new Error("boom"), { code: "ESERVFAIL" });
    };
    await expect(resolveHost("x.test", failing, 100)).rejects.toMatchObject({ check: "dns", message: /ESERVFAIL/ });
    await expect(resolveHost("x.test", async () => [], 100)).rejects.toMatchObject({ check: "dns" });
    await expect(resolveHost("x.test", async () => ["x.test"], 100)).rejects.toMatchObject({ check: "dns" });
    await expect(resolveHost("x.test", async () => [42 as unknown as string], 100)).rejects.toMatchObject({ check: "dns" });
    await expect(resolveHost("x.test", async () => null as unknown as string[], 100)).rejects.toMatchObject({ check: "dns" });
    const { error, ms } = await refusal(resolveHost("x.test", () => new Promise(() => {}), 100));
    expect(error).toBeInstanceOf(EgressError);
    expect(error.message).toMatch(/longer than 100 ms/);
    expect(ms).toBeLessThan(500);
  });
});
