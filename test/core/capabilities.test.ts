import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokeredFetch } from "../../src/capabilities.js";
import { sharedCodec } from "../../src/core/bindings.js";
import { createSandbox } from "../../src/index.js";
import { dnsServer } from "../egress/dns-server.js";
import type { ResolvedLimits } from "../../src/core/limits.js";

/** The run's brokered fetch on the host, against a real server on loopback. */
let server: Server;
let origin: string;

beforeAll(async () => {
  server = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "application/octet-stream" });
    res.end(Buffer.alloc(1_000_000, 97));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

async function fetchFor(maxBridgeCallBytes = 16 * 1024 * 1024) {
  const limits = { wallTimeMs: 5000, maxBridgeCallBytes } as ResolvedLimits;
  const fetch = await brokeredFetch({ net: [new URL(origin).host] }, { net: { internalOrigins: [origin] } }, limits);
  if (!fetch) throw new Error("no fetch");
  return fetch;
}

describe("the brokered fetch", () => {
  it("reads a response's body once, not through a clone (whose tee would keep a second copy)", async () => {
    const response = await (await fetchFor())(new Request(`${origin}/`));
    expect(response.bodyUsed).toBe(true);
    // What crosses to the guest still carries the whole body.
    const text = sharedCodec().encode(response, "response", Number.POSITIVE_INFINITY, false);
    expect(text.length).toBeGreaterThan((1_000_000 * 4) / 3);
  });
});

describe("policy.net.dnsServers", () => {
  it("points the egress at those DNS servers: a name only they know is fetched, and still checked", async () => {
    const dns = await dnsServer({ "api.cordon.test": { A: ["127.0.0.1"] } });
    const port = new URL(origin).port;
    try {
      await using sandbox = await createSandbox({
        engine: "v8",
        host: "inprocess",
        spareInstances: 0,
        policy: { net: { dnsServers: [dns.server], internalOrigins: [`http://api.cordon.test:${port}`] } },
      });
      const code = `export default async (url) => { try { return (await (await fetch(url)).arrayBuffer()).byteLength } catch (e) { return e.message } }`;
      const capabilities = { net: [`api.cordon.test:${port}`, "other.cordon.test"] };
      const fetched = await sandbox.run({ code, input: `http://api.cordon.test:${port}/`, capabilities });
      expect(fetched.ok && fetched.value).toBe(1_000_000);
      expect(dns.queries).toContain("A api.cordon.test");
      // A name the servers do not know fails closed; the system's DNS is not asked instead.
      const unknown = await sandbox.run({ code, input: "http://other.cordon.test/", capabilities });
      expect(unknown.ok && unknown.value).toMatch(/other\.cordon\.test/);
    } finally {
      dns.close();
    }
  });

  it("shows a guest one refusal for every way a name has no public address, so it cannot map internal DNS", async () => {
    const dns = await dnsServer({
      "inside.corp.test": { A: ["10.0.0.7"] },
      "meta.corp.test": { A: ["169.254.169.254"] },
      "loop.corp.test": { AAAA: ["::ffff:127.0.0.1"] },
      "gone.corp.test": { rcode: 3 },
      "broken.corp.test": { rcode: 2 },
      "empty.corp.test": {},
    });
    try {
      await using sandbox = await createSandbox({
        engine: "v8",
        host: "inprocess",
        spareInstances: 0,
        policy: { net: { dnsServers: [dns.server] } },
      });
      const code = `export default async (names) => {
        const out = [];
        for (const name of names) {
          try { await fetch("http://" + name + "/"); out.push("fetched") } catch (e) { out.push([e.code, e.check, e.message.replaceAll(name, "NAME")]) }
        }
        return out;
      }`;
      const names = ["inside", "meta", "loop", "gone", "broken", "empty"].map((n) => `${n}.corp.test`);
      const result = await sandbox.run({ code, input: names, capabilities: { net: ["*.corp.test"] } });
      expect(result.ok).toBe(true);
      const shown = result.ok ? (result.value as unknown[]) : [];
      expect(shown[0]).toEqual([
        "ERR_CAPABILITY_DENIED",
        "address",
        'egress refused: "NAME" has no public address: it does not resolve, or resolves to an address that is not public (http://NAME is not in internalOrigins)',
      ]);
      for (let i = 1; i < names.length; i++) expect(shown[i], names[i]).toEqual(shown[0]);
      // The run's log lines (the guest's own fetch logs its refusals) say no more than that.
      const logged = result.logs.map((l) => names.reduce((m, n) => m.replaceAll(n, "NAME"), l.message));
      expect(new Set(logged).size).toBe(1);
    } finally {
      dns.close();
    }
  });

  it("refuses what is not a list of server addresses", async () => {
    for (const dnsServers of [[], ["not a server"], "127.0.0.1", [53]]) {
      await expect(
        createSandbox({
          engine: "v8",
          host: "inprocess",
          spareInstances: 0,
          policy: { net: { dnsServers: dnsServers as string[] } },
        }),
        JSON.stringify(dnsServers),
      ).rejects.toThrow(/policy\.net\.dnsServers/);
    }
  });
});
