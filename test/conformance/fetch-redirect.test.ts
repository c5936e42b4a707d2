import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { completed } from "./results.js";

/**
 * The guest's fetch honours a Request's redirect mode on every engine and host, as Node 20's
 * fetch does (test/egress/redirect-modes.test.ts compares with Node's own): "manual" hands back
 * the 3xx and makes no further hop, "error" rejects with a TypeError, "follow" (the default)
 * follows up to policy.net.maxRedirects. Deno's own fetch agrees on all three (its rejection's
 * text differs), and a Deno guest's fetch is the host's anyway: no difference to table here.
 */
interface Listener {
  server: Server;
  origin: string;
  paths: string[];
  connections: number;
}

async function listen(handle: (path: string, res: import("node:http").ServerResponse) => void): Promise<Listener> {
  const listener = { paths: [] as string[], connections: 0 } as Listener;
  listener.server = createServer((req, res) => {
    listener.paths.push(req.url ?? "");
    handle(req.url ?? "", res);
  });
  listener.server.on("connection", () => listener.connections++);
  await new Promise<void>((resolve) => listener.server.listen(0, "127.0.0.1", resolve));
  listener.origin = `http://127.0.0.1:${(listener.server.address() as AddressInfo).port}`;
  return listener;
}

let site: Listener; // the deployment's own service: exempt by its origin
let internal: Listener; // loopback, in the rules but never exempt: the address check forbids it

beforeAll(async () => {
  internal = await listen((_path, res) => res.end("internal secret"));
  site = await listen((path, res) => {
    if (path === "/moved") res.writeHead(302, { location: "/landed" }).end("moved body");
    else if (path === "/loop") res.writeHead(301, { location: "/loop" }).end();
    else if (path === "/to-internal") res.writeHead(307, { location: `${internal.origin}/secret` }).end();
    else res.end(`landed at ${path}`);
  });
});

afterAll(async () => {
  for (const { server } of [site, internal]) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

describe.each(COMBINATIONS)("fetch's redirect modes on $name", (combo) => {
  let sandbox: Sandbox;
  let net: string[];
  beforeAll(async () => {
    // maxRedirects > 0, so "follow" and "manual" differ.
    sandbox = await createSandbox({ ...combo.options, policy: { net: { internalOrigins: [site.origin], maxRedirects: 3 } } });
    net = [site.origin, internal.origin].map((origin) => origin.replace("http://", ""));
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it('"manual" hands back the 3xx as it came (status, Location, body, url, redirected) and makes no further hop', async () => {
    const before = site.paths.length;
    const code = `export default async () => {
      const res = await fetch(${JSON.stringify(`${site.origin}/moved#fragment`)}, { redirect: "manual" });
      return { status: res.status, location: res.headers.get("location"), body: await res.text(), url: res.url, redirected: res.redirected };
    }`;
    const value = completed(await sandbox.run({ code, capabilities: { net } })).value;
    expect(value).toEqual({
      status: 302,
      location: "/landed",
      body: "moved body",
      url: `${site.origin}/moved`,
      redirected: false,
    });
    expect(site.paths.slice(before)).toEqual(["/moved"]);
    // The default, "follow", lands.
    const follow = `export default async () => { const res = await fetch(${JSON.stringify(`${site.origin}/moved`)}); return [res.status, res.url, res.redirected] }`;
    expect(completed(await sandbox.run({ code: follow, capabilities: { net } })).value).toEqual([
      200,
      `${site.origin}/landed`,
      true,
    ]);
  });

  it('"manual" never reaches a Location the egress forbids, and nothing is refused', async () => {
    const before = internal.connections;
    const code = `export default async () => {
      const manual = await fetch(${JSON.stringify(`${site.origin}/to-internal`)}, { redirect: "manual" });
      let follow;
      try { await fetch(${JSON.stringify(`${site.origin}/to-internal`)}); follow = "fetched" } catch (e) { follow = e.code }
      return [manual.status, manual.headers.get("location"), follow];
    }`;
    const result = completed(await sandbox.run({ code, capabilities: { net } }));
    expect(result.value).toEqual([307, `${internal.origin}/secret`, "ERR_CAPABILITY_DENIED"]);
    // One refusal, the "follow" hop's.
    expect(result.logs.filter((log) => log.message.startsWith("[cordon] fetch refused")).length).toBe(1);
    expect(internal.connections).toBe(before);
  });

  it('"error" rejects on a redirect with a TypeError that says so, after one request, a loop included', async () => {
    const before = site.paths.length;
    const code = `export default async () => {
      const out = [];
      for (const path of ["/moved", "/loop"]) {
        try { await fetch(${JSON.stringify(site.origin)} + path, { redirect: "error" }); out.push("fetched") }
        catch (e) { out.push([e instanceof TypeError, e.code, e.message]) }
      }
      return out;
    }`;
    const value = completed(await sandbox.run({ code, capabilities: { net } })).value as [boolean, unknown, string][];
    expect(value.map(([isTypeError, code]) => [isTypeError, code])).toEqual([
      [true, undefined],
      [true, undefined],
    ]);
    expect(value[0][2]).toMatch(
      new RegExp(`GET ${site.origin}/moved answered a 302 redirect to "/landed".*redirect mode is "error"`),
    );
    expect(value[1][2]).toMatch(/answered a 301 redirect to "\/loop".*redirect mode is "error"/);
    expect(site.paths.slice(before)).toEqual(["/moved", "/loop"]);
  });

  it("a Request's mode is used by fetch(request); an init's redirect overrides it; a mode not of the three is a TypeError", async () => {
    const before = site.paths.length;
    const url = JSON.stringify(`${site.origin}/moved`);
    const code = `export default async () => {
      const status = (p) => p.then((res) => res.status, (e) => e.name);
      const invalid = [];
      for (const redirect of ["MANUAL", "bogus", ""]) {
        try { new Request(${url}, { redirect }); invalid.push("made") } catch (e) { invalid.push(e.name) }
        try { await fetch(${url}, { redirect }); invalid.push("fetched") } catch (e) { invalid.push(e.name) }
      }
      return {
        request: await status(fetch(new Request(${url}, { redirect: "manual" }))),
        overridden: await status(fetch(new Request(${url}, { redirect: "error" }), { redirect: "manual" })),
        toFollow: await status(fetch(new Request(${url}, { redirect: "manual" }), { redirect: "follow" })),
        toError: await status(fetch(new Request(${url}, { redirect: "manual" }), { redirect: "error" })),
        kept: await status(fetch(new Request(${url}, { redirect: "error" }), { method: "GET" })),
        cloned: await status(fetch(new Request(${url}, { redirect: "manual" }).clone())),
        invalid,
      };
    }`;
    const value = completed(await sandbox.run({ code, capabilities: { net } })).value;
    expect(value).toEqual({
      request: 302,
      overridden: 302,
      toFollow: 200,
      toError: "TypeError",
      kept: "TypeError",
      cloned: 302,
      invalid: Array(6).fill("TypeError"),
    });
    // Invalid modes never reached the server.
    expect(site.paths.slice(before).filter((path) => path === "/moved").length).toBe(6);
  });

  it("a setter guest code puts on Object.prototype neither sees nor drops the mode as it crosses", async () => {
    const code = `export default async () => {
      const seen = [];
      Object.defineProperty(Object.prototype, "r", { set(v) { seen.push(v) }, get() { return undefined }, configurable: true });
      try {
        const res = await fetch(${JSON.stringify(`${site.origin}/moved`)}, { redirect: "manual" });
        return [res.status, seen];
      } finally {
        delete Object.prototype.r;
      }
    }`;
    expect(completed(await sandbox.run({ code, capabilities: { net } })).value).toEqual([302, []]);
  });

  it("a Request crossing into a call keeps its redirect mode", async () => {
    const result = await sandbox.run({
      code: "export default { fetch: (request) => [request.redirect, request.url] }",
      call: { export: "default.fetch", args: [new Request(`${site.origin}/x`, { redirect: "manual" })] },
    });
    expect(completed(result).value).toEqual(["manual", `${site.origin}/x`]);
  });
});
