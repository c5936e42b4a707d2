import http from "node:http";
import net from "node:net";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type ImportGrant, ImportProxy } from "../../src/egress/import-proxy.js";
import { type Listener, listen, tableResolver } from "./helpers.js";

let local: Listener;
let proxy: ImportProxy;
let grant: ImportGrant;
let resolver: ReturnType<typeof tableResolver>;

beforeAll(async () => {
  local = await listen("127.0.0.1");
});
afterAll(async () => {
  await local.close();
});

beforeEach(async () => {
  resolver = tableResolver({
    "mod.test": ["127.0.0.1"],
    "inside.test": ["127.0.0.1"],
    "mixed.test": ["93.184.215.14", "10.0.0.7"],
    "metadata.test": ["169.254.169.254"],
    "mapped.test": ["::ffff:127.0.0.1"],
  });
  proxy = await ImportProxy.start({
    resolve: resolver.resolve,
    internalOrigins: [`https://mod.test:${local.port}`, `http://mod.test:${local.port}`],
    connectTimeoutMs: 2000,
  });
  grant = proxy.grant([`mod.test:${local.port}`, "inside.test", "mixed.test", "metadata.test", "mapped.test"]);
});
afterEach(async () => {
  await proxy.close();
});

/** The proxy URL's credentials, as Deno sends them. */
function credentials(of: ImportGrant = grant): string {
  const url = new URL(of.env.HTTPS_PROXY);
  return `Basic ${Buffer.from(`${url.username}:${url.password}`).toString("base64")}`;
}

/** CONNECT through the proxy: its status, the refusal header, and the tunnel when it opened. */
function connect(target: string, auth: string | null = credentials()) {
  return new Promise<{ status: number; refusal: string | undefined; socket: net.Socket }>((resolve, reject) => {
    const req = http.request({
      host: "127.0.0.1",
      port: proxy.port,
      method: "CONNECT",
      path: target,
      headers: auth === null ? {} : { "proxy-authorization": auth },
    });
    req.on("connect", (res, socket) =>
      resolve({ status: res.statusCode ?? 0, refusal: res.headers["x-cordon-refusal"] as string | undefined, socket }),
    );
    req.on("error", reject);
    req.end();
  });
}

/** A plain HTTP request over an open tunnel (the local listener speaks HTTP, not TLS). */
function overTunnel(socket: net.Socket, host: string, path: string) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request({ createConnection: () => socket, path, headers: { host } });
    req.on("response", async (res) => {
      let body = "";
      for await (const chunk of res) body += chunk;
      resolve({ status: res.statusCode ?? 0, body });
    });
    req.on("error", reject);
    req.end();
  });
}

/** An absolute-form request to the proxy, as Deno makes for a plain-http import. */
function viaProxy(url: string, options: { method?: string; auth?: string } = {}) {
  return new Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
    const req = http.request({
      host: "127.0.0.1",
      port: proxy.port,
      method: options.method ?? "GET",
      path: url,
      headers: { "proxy-authorization": options.auth ?? credentials(), "x-kept": "yes" },
    });
    req.on("response", async (res) => {
      let body = "";
      for await (const chunk of res) body += chunk;
      resolve({ status: res.statusCode ?? 0, body, headers: res.headers });
    });
    req.on("error", reject);
    req.end();
  });
}

describe("the import proxy: tunnels (https imports)", () => {
  it("opens a tunnel to the address it checked, resolving the name once", async () => {
    const before = local.connections;
    const { status, socket } = await connect(`mod.test:${local.port}`);
    expect(status).toBe(200);
    const answer = await overTunnel(socket, `mod.test:${local.port}`, "/echo");
    socket.destroy();
    expect(answer.status).toBe(200);
    const seen = JSON.parse(answer.body);
    expect(seen.headers.host).toBe(`mod.test:${local.port}`);
    expect(seen.headers["proxy-authorization"]).toBeUndefined();
    expect(local.connections).toBe(before + 1);
    expect(resolver.calls).toEqual(["mod.test"]);
  });

  it("refuses a name whose DNS points at a special address, and connects nowhere", async () => {
    const before = local.connections;
    // One refusal for every special range: told apart, they map the host's internal DNS.
    for (const name of ["inside.test", "mixed.test", "metadata.test", "mapped.test"]) {
      const { status, refusal } = await connect(`${name}:${local.port}`);
      expect(status, name).toBe(403);
      expect(refusal, name).toBe(
        `"${name}" has no public address: it does not resolve, or resolves to an address that is not public (https://${name}:${local.port} is not in internalOrigins)`,
      );
    }
    expect(local.connections).toBe(before);
    expect(grant.refusals.map((r) => r.host)).toEqual(["inside.test", "mixed.test", "metadata.test", "mapped.test"]);
    // The tenant reads these (its import's error): no address a name resolved to, public or not.
    expect(JSON.stringify(grant.refusals)).not.toMatch(/127\.0\.0\.1|10\.0\.0\.7|93\.184|169\.254|ffff/);
  });

  it("names an address literal it refuses, the host being that address", async () => {
    const literal = proxy.grant(["127.0.0.1", `[::1]:${local.port}`]);
    expect((await connect(`127.0.0.1:${local.port}`, credentials(literal))).refusal).toBe(
      "127.0.0.1 is loopback, not a public address",
    );
    expect((await connect(`[::1]:${local.port}`, credentials(literal))).refusal).toBe("::1 is loopback, not a public address");
  });

  it("says why a connection failed, never to which address and port", async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    await proxy.close();
    proxy = await ImportProxy.start({ resolve: resolver.resolve, internalOrigins: [`https://inside.test:${port}`] });
    grant = proxy.grant([`inside.test:${port}`]);
    const { status, refusal } = await connect(`inside.test:${port}`);
    expect(status).toBe(502);
    expect(refusal).toBe("no address of inside.test accepted a connection (ECONNREFUSED)");
  });

  it("refuses hosts and ports the grant does not name, before resolving them", async () => {
    for (const target of [`other.test:${local.port}`, "mod.test:443", `MOD.test:${local.port + 1}`]) {
      const { status, refusal } = await connect(target);
      expect(status, target).toBe(403);
      expect(refusal, target).toMatch(/is not in capabilities\.import/);
    }
    expect(resolver.calls).toEqual([]);
    // A port-less entry is any port, as Deno reads --allow-import (and checked all the same).
    expect((await connect("inside.test:8443")).status).toBe(403);
    expect(resolver.calls).toEqual(["inside.test"]);
  });

  it("needs this grant's credentials, and a revoked grant's are refused and its tunnels closed", async () => {
    expect((await connect(`mod.test:${local.port}`, null)).status).toBe(407);
    expect((await connect(`mod.test:${local.port}`, "Basic bm9ib2R5Om5vdGhpbmc=")).status).toBe(407);
    const other = proxy.grant(["elsewhere.test"]);
    expect((await connect(`mod.test:${local.port}`, credentials(other))).status).toBe(403);
    const open = await connect(`mod.test:${local.port}`);
    expect(open.status).toBe(200);
    const closed = new Promise((resolve) => open.socket.once("close", resolve));
    grant.revoke();
    await closed;
    expect((await connect(`mod.test:${local.port}`)).status).toBe(407);
    expect(resolver.calls).toEqual(["mod.test"]);
  });

  it("refuses malformed targets with 400 and keeps serving", async () => {
    for (const target of ["mod.test", `user@mod.test:${local.port}`, "mod.test:99999", "mod.test:80/x", ":443"]) {
      expect((await connect(target)).status, target).toBe(400);
    }
    // Garbage on a raw socket ends that connection, not the proxy.
    const raw = net.connect(proxy.port, "127.0.0.1");
    raw.on("error", () => {});
    raw.resume();
    raw.end("CONNECT \u0000\r\n\r\n\r\n");
    await new Promise((resolve) => raw.once("close", resolve));
    expect((await connect(`mod.test:${local.port}`)).status).toBe(200);
  });

  it("fails closed when the name does not resolve, refused as a name with a special address is", async () => {
    const proxyWithGap = proxy.grant(["nowhere.test", "inside.test"]);
    const { status, refusal } = await connect("nowhere.test:443", credentials(proxyWithGap));
    const inside = await connect("inside.test:443", credentials(proxyWithGap));
    expect([status, refusal]).toEqual([
      403,
      '"nowhere.test" has no public address: it does not resolve, or resolves to an address that is not public (https://nowhere.test is not in internalOrigins)',
    ]);
    expect([inside.status, inside.refusal?.replace(/inside/g, "nowhere")]).toEqual([status, refusal]);
  });

  it("holds at most maxOpenPerGrant tunnels for one grant", async () => {
    await proxy.close();
    proxy = await ImportProxy.start({
      resolve: resolver.resolve,
      internalOrigins: [`https://mod.test:${local.port}`],
      maxOpenPerGrant: 2,
    });
    grant = proxy.grant([`mod.test:${local.port}`]);
    const first = await connect(`mod.test:${local.port}`);
    const second = await connect(`mod.test:${local.port}`);
    const third = await connect(`mod.test:${local.port}`);
    expect([first.status, second.status, third.status]).toEqual([200, 200, 503]);
    first.socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await connect(`mod.test:${local.port}`)).status).toBe(200);
  });
});

describe("the import proxy: plain-http imports", () => {
  it("forwards a GET to the checked address with the URL's Host, and not the proxy's credentials", async () => {
    const answer = await viaProxy(`http://mod.test:${local.port}/echo?q=1`);
    expect(answer.status).toBe(200);
    const seen = JSON.parse(answer.body);
    expect(seen.url).toBe("/echo?q=1");
    expect(seen.headers.host).toBe(`mod.test:${local.port}`);
    expect(seen.headers["x-kept"]).toBe("yes");
    expect(seen.headers["proxy-authorization"]).toBeUndefined();
  });

  it("refuses special addresses, other hosts, other methods and other schemes, with a reason", async () => {
    const before = local.requests.length;
    const loopback = await viaProxy(`http://inside.test:${local.port}/echo`);
    expect(loopback.status).toBe(403);
    expect(loopback.body).toBe(
      `cordon: "inside.test" has no public address: it does not resolve, or resolves to an address that is not public (http://inside.test:${local.port} is not in internalOrigins)\n`,
    );
    expect((await viaProxy(`http://other.test:${local.port}/echo`)).status).toBe(403);
    expect((await viaProxy(`http://mod.test:${local.port}/echo`, { method: "POST" })).status).toBe(405);
    expect((await viaProxy(`https://mod.test:${local.port}/echo`)).status).toBe(400);
    expect((await viaProxy(`http://u:p@mod.test:${local.port}/echo`)).status).toBe(400);
    expect((await viaProxy("/echo")).status).toBe(400);
    expect((await viaProxy(`http://mod.test:${local.port}/echo`, { auth: "Basic Y29yZG9uOng=" })).status).toBe(407);
    expect(local.requests.length).toBe(before);
  });
});

describe("the import proxy: hostile clients and upstreams", () => {
  it("an upstream answering a status below 100 gets a 502, and the host lives on", async () => {
    // A raw server: Node's HTTP client accepts any three digits, and writeHead threw on them.
    const upstream = net.createServer((socket) => {
      socket.on("error", () => {});
      socket.once("data", () => socket.end("HTTP/1.1 000 Zero\r\ncontent-length: 2\r\n\r\nhi"));
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const port = (upstream.address() as net.AddressInfo).port;
    await proxy.close();
    proxy = await ImportProxy.start({ resolve: resolver.resolve, internalOrigins: [`http://mod.test:${port}`] });
    grant = proxy.grant([`mod.test:${port}`]);
    try {
      for (let i = 0; i < 3; i++) {
        const answer = await viaProxy(`http://mod.test:${port}/m.js`);
        expect(answer.status).toBe(502);
        expect(answer.body).toMatch(/answered with status 0/);
      }
    } finally {
      upstream.close();
    }
  });

  it("a refused tunnel's socket is closed by the proxy even when its client keeps it open", async () => {
    // Half-open allowed: this client never closes its end after the proxy's answer.
    const raw = net.connect({ port: proxy.port, host: "127.0.0.1", allowHalfOpen: true });
    raw.on("error", () => {});
    raw.resume();
    raw.write(`CONNECT mod.test:${local.port} HTTP/1.1\r\nhost: mod.test:${local.port}\r\n\r\n`);
    await new Promise((resolve) => raw.once("end", resolve));
    expect(proxy.connections).toBe(1);
    const started = performance.now();
    while (proxy.connections > 0 && performance.now() - started < 5000) await new Promise((r) => setTimeout(r, 50));
    raw.destroy();
    expect(proxy.connections).toBe(0);
  });

  it("a request whose client goes away, or whose grant is revoked, while its name resolves ends the lookup", async () => {
    await proxy.close();
    const signals: AbortSignal[] = [];
    const hanging = (_host: string, signal?: AbortSignal) => {
      if (signal) signals.push(signal);
      return new Promise<string[]>(() => {});
    };
    proxy = await ImportProxy.start({ resolve: hanging, internalOrigins: [`https://mod.test:${local.port}`] });
    grant = proxy.grant([`mod.test:${local.port}`]);
    const target = `mod.test:${local.port}`;
    const open = (head: string) => {
      const raw = net.connect({ port: proxy.port, host: "127.0.0.1" });
      raw.on("error", () => {});
      raw.write(`${head} HTTP/1.1\r\nhost: ${target}\r\nproxy-authorization: ${credentials()}\r\n\r\n`);
      return raw;
    };
    // A plain request's client closes: its lookup ends (before, it ran on to the DNS time-out, 5 s).
    const request = open(`GET http://${target}/echo`);
    await expect.poll(() => signals.length, { timeout: 2000 }).toBe(1);
    expect(signals[0].aborted).toBe(false);
    request.destroy();
    await expect.poll(() => signals[0].aborted, { timeout: 2000 }).toBe(true);
    // A tunnel's socket is not read until the tunnel is up, so its client's leaving is seen only
    // then; revoking the grant (its process ended) closes it, and ends the lookup.
    const tunnel = open(`CONNECT ${target}`);
    await expect.poll(() => signals.length, { timeout: 2000 }).toBe(2);
    grant.revoke();
    await expect.poll(() => signals[1].aborted, { timeout: 2000 }).toBe(true);
    tunnel.destroy();
  });

  it("a grant revoked while its name resolves connects nowhere", async () => {
    await proxy.close();
    const slow = async (host: string) => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      return resolver.resolve(host);
    };
    proxy = await ImportProxy.start({
      resolve: slow,
      internalOrigins: [`https://mod.test:${local.port}`, `http://mod.test:${local.port}`],
    });
    grant = proxy.grant([`mod.test:${local.port}`]);
    const before = local.connections;
    const tunnel = connect(`mod.test:${local.port}`).catch(() => "closed");
    const request = viaProxy(`http://mod.test:${local.port}/echo`).catch(() => "closed");
    await new Promise((resolve) => setTimeout(resolve, 50));
    grant.revoke();
    await Promise.all([tunnel, request]);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(local.connections).toBe(before);
  });

  it("many requests on one kept-alive connection add no listener each", async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on("warning", onWarning);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 30; i++) {
        const status = await new Promise<number>((resolve, reject) => {
          const req = http.request({
            host: "127.0.0.1",
            port: proxy.port,
            path: `http://mod.test:${local.port}/echo`,
            agent,
            headers: { "proxy-authorization": credentials() },
          });
          req.on("response", (res) => {
            res.resume();
            res.on("end", () => resolve(res.statusCode ?? 0));
          });
          req.on("error", reject);
          req.end();
        });
        expect(status).toBe(200);
      }
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).not.toContain("MaxListenersExceededWarning");
    } finally {
      agent.destroy();
      process.off("warning", onWarning);
    }
  });

  it("refuses port 0, even for a host granted on any port", async () => {
    expect((await connect("inside.test:0")).status).toBe(400);
    expect(resolver.calls).toEqual([]);
  });
});
