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
