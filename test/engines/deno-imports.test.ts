import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandbox, type Sandbox } from "../../src/index.js";
import { completed, failed } from "../conformance/results.js";
import { dnsServer } from "../egress/dns-server.js";

// The deno engine's remote imports go through cordon's import proxy (src/egress/import-proxy.ts):
// Deno resolves no name itself. The names below live only in a DNS server on 127.0.0.1 that
// cordon is pointed at (policy.net.dnsServers); Deno, asking the system's DNS, could not reach them.
describe("deno: remote imports through the import proxy", () => {
  let server: Server;
  let port: number;
  const served: string[] = [];
  let dns: Awaited<ReturnType<typeof dnsServer>>;
  let sandbox: Sandbox;

  beforeAll(async () => {
    server = createServer((req, res) => {
      served.push(`${req.headers.host} ${req.url}`);
      res.writeHead(200, { "content-type": "application/javascript" });
      res.end("export default 'fetched through the proxy';");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
    dns = await dnsServer({
      "modules.cordon.test": { A: ["127.0.0.1"] },
      "rebound.cordon.test": { A: ["127.0.0.1"] },
      "inside.cordon.test": { A: ["93.184.215.14", "10.1.2.3"] },
      "registry.npmjs.org": { A: ["127.0.0.1"] },
    });
    sandbox = await createSandbox({
      engine: "deno",
      spareInstances: 0,
      policy: { net: { dnsServers: [dns.server], internalOrigins: [`http://modules.cordon.test:${port}`] } },
    });
  });
  afterAll(async () => {
    await sandbox.dispose();
    dns.close();
    server.close();
  });

  const importing = (url: string) => `import v from ${JSON.stringify(url)}; export default () => v;`;
  const limits = { wallTimeMs: 20_000 };

  it("an exempt origin's module arrives, fetched from the address cordon resolved", async () => {
    const url = `http://modules.cordon.test:${port}/m.js?${Date.now()}`;
    const result = await sandbox.run({ code: importing(url), capabilities: { import: [`modules.cordon.test:${port}`] }, limits });
    expect(completed(result).value).toBe("fetched through the proxy");
    expect(served).toContain(`modules.cordon.test:${port} /m.js?${url.split("?")[1]}`);
    expect(dns.queries).toContain("A modules.cordon.test");
  });

  it("a permitted name whose DNS points at a special address is refused, over http and https, and nothing is fetched", async () => {
    const before = served.length;
    for (const [host, address] of [
      ["rebound.cordon.test", "127.0.0.1"],
      ["inside.cordon.test", "10.1.2.3"],
    ]) {
      for (const scheme of ["http", "https"]) {
        const url = `${scheme}://${host}:${port}/m.js?${Date.now()}`;
        const result = failed(await sandbox.run({ code: importing(url), capabilities: { import: [`${host}:${port}`] }, limits }));
        expect(result.error.code, url).toBe("ERR_MODULE_NOT_FOUND");
        expect(result.error.message, url).toContain(
          `cordon's import proxy refused it: "${host}" has no public address: it does not resolve, or resolves to an address that is not public`,
        );
        // The tenant reads this message: the host's view of internal DNS stays out of it, the
        // range the address is in included.
        expect(result.error.message, url).not.toContain(address);
        expect(result.error.message, url).not.toMatch(/loopback|private/);
      }
    }
    expect(served.length).toBe(before);
  });

  it("npm packages are fetched through the proxy too, with no import hosts granted", async () => {
    // The DNS server above points the registry at loopback: the proxy asks it, and refuses.
    const result = failed(
      await sandbox.run({ code: `import pad from "npm:cordon-no-such-package-${Date.now()}"; export default pad;`, limits }),
    );
    expect(result.error.code).toBe("ERR_MODULE_NOT_FOUND");
    expect(result.error.message).toContain(`cordon's import proxy refused it: "registry.npmjs.org" has no public address`);
    expect(result.error.message).not.toContain("127.0.0.1");
    expect(dns.queries).toContain("A registry.npmjs.org");
  });

  it("what one process downloads, a later process (with a DENO_DIR of its own) loads from the shared cache", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "cordon-test-denocache-"));
    try {
      const url = `http://modules.cordon.test:${port}/cached.js?${Date.now()}`;
      const capabilities = { import: [`modules.cordon.test:${port}`] };
      const net = { dnsServers: [dns.server], internalOrigins: [`http://modules.cordon.test:${port}`] };
      const options = { engine: "deno" as const, spareInstances: 0, policy: { net } };
      await using fetching = await createSandbox({ ...options, deno: { cacheDir } });
      expect(completed(await fetching.run({ code: importing(url), capabilities, limits })).value).toBe(
        "fetched through the proxy",
      );
      const before = served.length;
      await using cached = await createSandbox({ ...options, deno: { cacheDir, cachedOnly: true } });
      const result = await cached.run({ code: `${importing(url)} // another function`, capabilities, limits });
      expect(completed(result).value).toBe("fetched through the proxy");
      expect(served.length).toBe(before);
    } finally {
      rmSync(cacheDir, { recursive: true, force: true });
    }
  });

  it("a guest's dynamic import of a refused module is a catchable error; the process lives on", async () => {
    const code = `export default async () => {
      try { await import("https://rebound.cordon.test:${port}/x.js?${Date.now()}"); return "imported" }
      catch (e) { return "caught" } }`;
    const result = await sandbox.run({ code, capabilities: { import: [`rebound.cordon.test:${port}`] }, limits });
    expect(completed(result).value).toBe("caught");
  });
});
