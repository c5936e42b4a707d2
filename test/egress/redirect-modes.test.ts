import { once } from "node:events";
import http from "node:http";
import type net from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createSafeFetch, EgressError, type SafeFetchOptions } from "../../src/egress/index.js";
import { guardConnections, tableResolver } from "./helpers.js";

/**
 * A request's redirect mode ("follow", "manual", "error"), as Node 20's own fetch (undici) treats
 * it: each case runs Node's fetch against the same real listener and compares.
 */
interface Server {
  origin: string;
  paths: string[];
  connections: number;
  close(): Promise<void>;
}

async function serve(): Promise<Server> {
  const state = { origin: "", paths: [] as string[], connections: 0, close: async () => {} };
  const server = http.createServer((req, res) => {
    state.paths.push(req.url ?? "");
    const path = new URL(req.url ?? "/", "http://x").pathname;
    if (path === "/moved") res.writeHead(302, { location: "/landed" }).end("moved body");
    else if (path === "/loop") res.writeHead(301, { location: "/loop" }).end();
    else if (path === "/no-location") res.writeHead(302).end("no location");
    else if (path === "/not-modified") res.writeHead(304, { location: "/landed" }).end();
    else if (path === "/to-internal") res.writeHead(307, { location: `http://127.0.0.1:${internalPort}/secret` }).end();
    else if (path === "/to-metadata") res.writeHead(302, { location: "http://169.254.169.254/latest/meta-data/" }).end();
    else res.writeHead(200).end(`landed at ${req.url}`);
  });
  server.on("connection", () => state.connections++);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  state.origin = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  state.close = async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return state;
}

let site: Server; // exempted: the deployment's own service on loopback
let internal: Server; // loopback too, never exempted: reaching it is what the egress forbids
let internalPort = 0;
let guard: ReturnType<typeof guardConnections>;

beforeAll(async () => {
  internal = await serve();
  internalPort = Number(new URL(internal.origin).port);
  site = await serve();
  guard = guardConnections();
});
afterAll(async () => {
  guard.restore();
  await Promise.all([site.close(), internal.close()]);
});
afterEach(() => {
  expect(guard.attempts.filter((attempt) => attempt.blocked)).toEqual([]);
  guard.attempts.length = 0;
});

function safeFetchFor(extra: Partial<SafeFetchOptions> = {}) {
  const { resolve, calls } = tableResolver({});
  const safeFetch = createSafeFetch({
    rules: ["127.0.0.1", "169.254.169.254"].flatMap((host) => [
      host,
      `${host}:${new URL(site.origin).port}`,
      `${host}:${internalPort}`,
    ]),
    internalOrigins: [site.origin],
    resolve,
    maxRedirects: 3,
    ...extra,
  });
  return { safeFetch, calls };
}

/** What a test compares of a Response with Node's. */
async function shape(response: Response) {
  return {
    status: response.status,
    url: response.url,
    redirected: response.redirected,
    location: response.headers.get("location"),
    body: await response.text(),
  };
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error("expected the fetch to reject");
}

describe('redirect: "manual"', () => {
  it("hands back the 3xx as it came, as Node's fetch does, and makes no further hop", async () => {
    const { safeFetch } = safeFetchFor();
    const url = `${site.origin}/moved#fragment`;
    const before = site.paths.length;
    const ours = await shape(await safeFetch(url, { redirect: "manual" }));
    expect(site.paths.slice(before)).toEqual(["/moved"]);
    const node = await shape(await fetch(url, { redirect: "manual" }));
    expect(ours).toEqual(node);
    expect(ours).toEqual({
      status: 302,
      url: `${site.origin}/moved`,
      redirected: false,
      location: "/landed",
      body: "moved body",
    });
  });

  it("never reaches a Location the egress forbids: no connection, no resolution, no refusal", async () => {
    const { safeFetch, calls } = safeFetchFor();
    const before = internal.connections;
    const response = await safeFetch(`${site.origin}/to-internal`, { redirect: "manual" });
    expect([response.status, response.headers.get("location")]).toEqual([307, `http://127.0.0.1:${internalPort}/secret`]);
    const metadata = await safeFetch(`${site.origin}/to-metadata`, { redirect: "manual" });
    expect(metadata.status).toBe(302);
    expect(internal.connections).toBe(before);
    expect(calls).toEqual([]);
    expect(guard.attempts.every((attempt) => attempt.port === Number(new URL(site.origin).port))).toBe(true);
    // "follow" with the same rules refuses that hop at the address check.
    const follow = await rejection(safeFetch(`${site.origin}/to-internal`));
    expect(follow).toBeInstanceOf(EgressError);
    expect((follow as EgressError).check).toBe("address");
    expect(internal.connections).toBe(before);
  });
});

describe('redirect: "error"', () => {
  it.each([
    ["a 302 with a Location", "/moved", 302],
    ["a redirect loop", "/loop", 301],
    ["a 302 without a Location", "/no-location", 302],
  ])("rejects on %s with a TypeError, as Node's fetch does, after one request", async (_, path, status) => {
    for (const maxRedirects of [0, 3]) {
      const { safeFetch } = safeFetchFor({ maxRedirects });
      const before = site.paths.length;
      const error = await rejection(safeFetch(`${site.origin}${path}`, { redirect: "error" }));
      expect(site.paths.slice(before)).toEqual([path]);
      expect(error).toBeInstanceOf(TypeError);
      expect(error).not.toBeInstanceOf(EgressError);
      expect(error.message).toContain(`GET ${site.origin}${path} answered a ${status} redirect`);
      expect(error.message).toContain('redirect mode is "error"');
      const node = await rejection(fetch(`${site.origin}${path}`, { redirect: "error" }));
      expect(node).toBeInstanceOf(TypeError);
    }
  });

  it("lets a 304 (not a redirect status) through, as Node's fetch does", async () => {
    const { safeFetch } = safeFetchFor();
    const url = `${site.origin}/not-modified`;
    expect(await shape(await safeFetch(url, { redirect: "error" }))).toEqual(
      await shape(await fetch(url, { redirect: "error" })),
    );
  });
});

describe("the mode a Request carries", () => {
  it("is used by fetch(request), and an init's redirect overrides it, as in Node", async () => {
    const { safeFetch } = safeFetchFor();
    const url = `${site.origin}/moved`;
    for (const call of [safeFetch, fetch] as const) {
      expect((await call(new Request(url, { redirect: "manual" }))).status).toBe(302);
      expect((await call(new Request(url, { redirect: "error" }), { redirect: "manual" })).status).toBe(302);
      expect((await call(new Request(url, { redirect: "manual" }), { redirect: "follow" })).status).toBe(200);
      await expect(call(new Request(url, { redirect: "manual" }), { redirect: "error" })).rejects.toThrow(TypeError);
      await expect(call(new Request(url, { redirect: "error" }), { method: "GET" })).rejects.toThrow(TypeError);
    }
  });

  it("is validated when the Request is made: a mode that is not one of the three is a TypeError, before any connection", async () => {
    const { safeFetch } = safeFetchFor();
    const before = site.connections;
    for (const redirect of ["MANUAL", "bogus", ""]) {
      await expect(safeFetch(`${site.origin}/moved`, { redirect } as RequestInit)).rejects.toThrow(TypeError);
    }
    expect(site.connections).toBe(before);
  });
});
