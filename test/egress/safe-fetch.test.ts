import { once } from "node:events";
import net from "node:net";
import tls from "node:tls";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createSafeFetch, EgressError, type SafeFetchOptions } from "../../src/egress/index.js";
import { echoOf, guardConnections, type Listener, listen, refusal, tableResolver } from "./helpers.js";

let local: Listener; // 127.0.0.1, exempted in most tests
let other: Listener; // ::1, a second exempted origin
let internal: Listener; // 127.0.0.1, never exempted
let guard: ReturnType<typeof guardConnections>;

beforeAll(async () => {
  [local, other, internal] = await Promise.all([listen("127.0.0.1"), listen("::1"), listen("127.0.0.1")]);
  guard = guardConnections();
});
afterAll(async () => {
  guard.restore();
  await Promise.all([local.close(), other.close(), internal.close()]);
});
afterEach(() => {
  // No test may have tried to leave loopback.
  expect(guard.attempts.filter((attempt) => attempt.blocked)).toEqual([]);
  guard.attempts.length = 0;
});

function names() {
  return tableResolver({
    "api.test": ["127.0.0.1"],
    "other.test": ["::1"],
    "internal.test": ["127.0.0.1"],
  });
}

function safeFetchFor(extra: Partial<SafeFetchOptions> = {}) {
  const { resolve, calls } = names();
  const safeFetch = createSafeFetch({
    rules: [`api.test:${local.port}`, `other.test:${other.port}`, `127.0.0.1:${local.port}`],
    internalOrigins: [
      `http://api.test:${local.port}`,
      `http://other.test:${other.port}`,
      `http://127.0.0.1:${local.port}`,
      `http://[::1]:${other.port}`,
    ],
    resolve,
    ...extra,
  });
  return { safeFetch, calls };
}

describe("an allowed request", () => {
  it("connects to the pinned address while Host (and the URL) keep the name", async () => {
    const { safeFetch, calls } = safeFetchFor();
    const response = await safeFetch(`http://api.test:${local.port}/echo?q=1`);
    expect(response).toBeInstanceOf(Response);
    expect(response.status).toBe(200);
    const seen = await echoOf(response);
    expect(seen.headers.host).toBe(`api.test:${local.port}`);
    expect(seen.localAddress).toBe("127.0.0.1");
    expect(seen.url).toBe("/echo?q=1");
    expect(response.url).toBe(`http://api.test:${local.port}/echo?q=1`);
    expect(response.headers.getSetCookie()).toEqual(["a=1", "b=2"]);
    expect(calls).toEqual(["api.test"]);
    expect(guard.attempts).toMatchObject([{ host: "api.test", addresses: ["127.0.0.1"] }]);
  });

  it("reaches an exempted internal origin by its address, over IPv6 too", async () => {
    const { safeFetch } = safeFetchFor({ rules: [`127.0.0.1:${local.port}`, `[::1]:${other.port}`] });
    expect((await safeFetch(`http://127.0.0.1:${local.port}/echo`)).status).toBe(200);
    const v6 = await echoOf(await safeFetch(`http://[::1]:${other.port}/echo`));
    expect(v6.headers.host).toBe(`[::1]:${other.port}`);
  });

  it("refuses the exempted origin's lookalikes: another port, a suffix, another scheme", async () => {
    const { safeFetch } = safeFetchFor({ rules: ["*", `*:${local.port}`, `*:${internal.port}`] });
    const before = local.connections + internal.connections;
    await expect(safeFetch(`http://127.0.0.1:${internal.port}/`)).rejects.toMatchObject({ check: "address" });
    await expect(safeFetch(`http://127.0.0.1:${local.port}.evil.test/`)).rejects.toMatchObject({ check: "url" });
    await expect(safeFetch(`https://127.0.0.1:${local.port}/`)).rejects.toMatchObject({ check: "address" });
    await expect(safeFetch(`http://127.0.0.2:${local.port}/`)).rejects.toMatchObject({ check: "address" });
    expect(local.connections + internal.connections).toBe(before);
  });

  it("exempts the origin as written, never a name that resolves to a listed address", async () => {
    // A run allowed its own domain could point that domain's DNS at the deployment's internal API.
    const { resolve, calls } = tableResolver({ "tenant.test": ["127.0.0.1"], "tenant6.test": ["::1"] });
    const { safeFetch } = safeFetchFor({ rules: [`tenant.test:${local.port}`, `tenant6.test:${other.port}`], resolve });
    const before = local.connections + other.connections;
    for (const url of [`http://tenant.test:${local.port}/echo`, `http://tenant6.test:${other.port}/echo`]) {
      const { error } = await refusal(safeFetch(url));
      expect(error).toMatchObject({ code: "ERR_CAPABILITY_DENIED", check: "address" });
      expect(error.message).not.toMatch(/127\.0\.0\.1|::1/);
    }
    expect(local.connections + other.connections).toBe(before);
    expect(calls).toEqual(["tenant.test", "tenant6.test"]);
  });

  it("sends the body, method and headers, and strips a Host header the caller set", async () => {
    const { safeFetch } = safeFetchFor();
    const response = await safeFetch(`http://api.test:${local.port}/echo`, {
      method: "post",
      body: "hello",
      headers: { host: "evil.test", "x-custom": "yes", connection: "close, x-custom" },
    });
    const seen = await echoOf(response);
    expect(seen).toMatchObject({ method: "POST", body: "hello" });
    expect(seen.headers).toMatchObject({ host: `api.test:${local.port}`, "x-custom": "yes" });
  });

  it("accepts a Request as input", async () => {
    const { safeFetch } = safeFetchFor();
    const request = new Request(`http://api.test:${local.port}/echo`, { method: "PUT", body: "from a Request" });
    const seen = await echoOf(await safeFetch(request));
    expect(seen).toMatchObject({ method: "PUT", body: "from a Request" });
  });

  it("normalizes letter case and a trailing dot before matching rules", async () => {
    const { safeFetch } = safeFetchFor();
    const seen = await echoOf(await safeFetch(`http://API.Test.:${local.port}/echo`));
    expect(seen.headers.host).toBe(`api.test.:${local.port}`);
  });

  it("sends TLS SNI for the name while connecting to the pinned address, and keeps certificate checks", async () => {
    // A TLS listener without a certificate: it records the SNI of the ClientHello, then fails the handshake.
    const snis: string[] = [];
    const remotes: string[] = [];
    const server = tls.createServer({
      SNICallback: (servername, callback) => {
        snis.push(servername);
        callback(new Error("test listener has no certificate"));
      },
    });
    server.on("connection", (socket: net.Socket) => remotes.push(socket.localAddress ?? ""));
    server.on("tlsClientError", () => {});
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const port = (server.address() as net.AddressInfo).port;
    try {
      const safeFetch = createSafeFetch({
        rules: [`secure.test:${port}`],
        internalOrigins: [`https://secure.test:${port}`],
        resolve: async () => ["127.0.0.1"],
      });
      const error = await safeFetch(`https://secure.test:${port}/`).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TypeError);
      expect(error).not.toBeInstanceOf(EgressError);
      expect(snis).toEqual(["secure.test"]);
      expect(remotes).toEqual(["127.0.0.1"]);
    } finally {
      server.close();
    }
  });
});

describe("redirects", () => {
  const to = (target: string, status = 302) => `/redirect?status=${status}&to=${encodeURIComponent(target)}`;

  it("are not followed by default: the caller sees the 3xx", async () => {
    const { safeFetch } = safeFetchFor();
    const response = await safeFetch(`http://api.test:${local.port}${to("http://evil.test/")}`);
    expect(response.status).toBe(302);
    expect(response.headers.get("location")).toBe("http://evil.test/");
  });

  it("with maxRedirects, are followed within the origin keeping credentials", async () => {
    const { safeFetch } = safeFetchFor({ maxRedirects: 2 });
    const response = await safeFetch(`http://api.test:${local.port}${to("/echo")}`, {
      headers: { authorization: "Bearer t", cookie: "s=1" },
    });
    expect(response.redirected).toBe(true);
    expect(response.url).toBe(`http://api.test:${local.port}/echo`);
    const seen = await echoOf(response);
    expect(seen.headers).toMatchObject({ authorization: "Bearer t", cookie: "s=1" });
  });

  it("drop authorization and cookie across origins", async () => {
    const { safeFetch, calls } = safeFetchFor({ maxRedirects: 2 });
    const response = await safeFetch(`http://api.test:${local.port}${to(`http://other.test:${other.port}/echo`)}`, {
      headers: { authorization: "Bearer t", cookie: "s=1", "x-keep": "1" },
    });
    const seen = await echoOf(response);
    expect(seen.headers.authorization).toBeUndefined();
    expect(seen.headers.cookie).toBeUndefined();
    expect(seen.headers["x-keep"]).toBe("1");
    expect(seen.headers.host).toBe(`other.test:${other.port}`);
    expect(calls).toEqual(["api.test", "other.test"]);
  });

  it("refuse a hop whose rule has routes when the request carries a header that overrides them", async () => {
    const { safeFetch } = safeFetchFor({
      maxRedirects: 2,
      rules: [`api.test:${local.port}`, { host: "other.test", port: other.port, routes: [{ path: "/echo", methods: ["GET"] }] }],
    });
    const before = other.connections;
    const { error } = await refusal(
      safeFetch(`http://api.test:${local.port}${to(`http://other.test:${other.port}/echo`)}`, {
        headers: { "x-http-method-override": "DELETE" },
      }),
    );
    expect([error.check, error.message]).toEqual([
      "rule",
      expect.stringMatching(
        /header "x-http-method-override" .* rule "other.test" allows only its routes .*\(redirect from http:\/\/api\.test:\d+\)$/,
      ),
    ]);
    expect(other.connections).toBe(before);
  });

  it("turn a POST into a GET without body on 303, and keep it on 307", async () => {
    const { safeFetch } = safeFetchFor({ maxRedirects: 1 });
    const see = await echoOf(await safeFetch(`http://api.test:${local.port}${to("/echo", 303)}`, { method: "POST", body: "x" }));
    expect(see).toMatchObject({ method: "GET", body: "" });
    expect(see.headers["content-type"]).toBeUndefined();
    const keep = await echoOf(await safeFetch(`http://api.test:${local.port}${to("/echo", 307)}`, { method: "POST", body: "x" }));
    expect(keep).toMatchObject({ method: "POST", body: "x" });
  });

  it.each([
    ["an internal address", () => `http://127.0.0.1:${internal.port}/echo`, "address"],
    ["an internal name", () => `http://internal.test:${internal.port}/echo`, "rule"],
    ["a host outside the rules", () => "http://outside.test/", "rule"],
    ["a port outside the rules", () => `http://api.test:${internal.port}/`, "rule"],
    ["file:", () => "file:///etc/passwd", "scheme"],
    ["credentials", () => `http://user:pw@api.test:${local.port}/echo`, "url"],
    ["metadata", () => "http://169.254.169.254/latest/meta-data/", "address"],
  ])("are refused at the hop to %s", async (_, target, check) => {
    const { safeFetch } = safeFetchFor({
      maxRedirects: 3,
      rules: [`api.test:${local.port}`, `127.0.0.1:${internal.port}`, "169.254.169.254"],
    });
    const before = internal.connections;
    const { error, ms } = await refusal(safeFetch(`http://api.test:${local.port}${to(target())}`));
    expect(error.check).toBe(check);
    expect(error.message).toContain("redirect from");
    expect(ms).toBeLessThan(1000);
    expect(internal.connections).toBe(before);
  });

  it("past maxRedirects are refused", async () => {
    const { safeFetch } = safeFetchFor({ maxRedirects: 1 });
    const loop = to(to("/echo"));
    await expect(safeFetch(`http://api.test:${local.port}${loop}`)).rejects.toMatchObject({ check: "redirect" });
  });
});

describe("caps", () => {
  it("refuse a request body over maxRequestBytes before connecting", async () => {
    const { safeFetch, calls } = safeFetchFor({ maxRequestBytes: 1000 });
    const before = local.connections;
    const { error } = await refusal(safeFetch(`http://api.test:${local.port}/echo`, { method: "POST", body: "x".repeat(1001) }));
    expect(error.check).toBe("request-too-large");
    const stream = new ReadableStream({
      pull(controller) {
        controller.enqueue(new Uint8Array(600));
      },
    });
    const streamed = await refusal(
      safeFetch(`http://api.test:${local.port}/echo`, { method: "POST", body: stream, duplex: "half" } as RequestInit),
    );
    expect(streamed.error.check).toBe("request-too-large");
    expect(local.connections).toBe(before);
    expect(calls).toEqual([]);
    expect(guard.attempts).toEqual([]);
    const exact = await safeFetch(`http://api.test:${local.port}/echo`, { method: "POST", body: "x".repeat(1000) });
    expect((await echoOf(exact)).body).toHaveLength(1000);
  });

  it("fail a response body over maxResponseBytes while it streams, and close the connection", async () => {
    const { safeFetch } = safeFetchFor({ maxResponseBytes: 200_000 });
    const aborted = local.aborted;
    const response = await safeFetch(`http://api.test:${local.port}/big`);
    expect(response.status).toBe(200);
    const reader = response.body!.getReader();
    let received = 0;
    const error = await (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return null;
        received += value.byteLength;
      }
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EgressError);
    expect(error).toMatchObject({ code: "ERR_CAPABILITY_DENIED", check: "response-too-large" });
    expect(received).toBeLessThanOrEqual(200_000);
    await expect.poll(() => local.aborted).toBe(aborted + 1);
  });

  it("count decompressed bytes, so a small gzip body cannot inflate past the cap", async () => {
    const { safeFetch } = safeFetchFor({ maxResponseBytes: 100_000 });
    const response = await safeFetch(`http://api.test:${local.port}/gzip`);
    await expect(response.arrayBuffer()).rejects.toMatchObject({ check: "response-too-large" });
    const roomy = createSafeFetch({ rules: [`api.test:${local.port}`], ...optionsFor() });
    expect((await (await roomy(`http://api.test:${local.port}/gzip`)).arrayBuffer()).byteLength).toBe(1024 * 1024);
  });

  it("end the whole exchange at timeoutMs: waiting for headers", async () => {
    const { safeFetch } = safeFetchFor({ timeoutMs: 300 });
    const { error, ms } = await refusal(safeFetch(`http://api.test:${local.port}/hang`));
    expect(error.check).toBe("timeout");
    expect(ms).toBeGreaterThanOrEqual(250);
    expect(ms).toBeLessThan(1000);
  });

  it("end the whole exchange at timeoutMs: reading the body", async () => {
    const { safeFetch } = safeFetchFor({ timeoutMs: 300 });
    const started = performance.now();
    const response = await safeFetch(`http://api.test:${local.port}/stall`);
    await expect(response.text()).rejects.toMatchObject({ check: "timeout" });
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it("close the connection at timeoutMs when the caller never reads the body", async () => {
    const { safeFetch } = safeFetchFor({ timeoutMs: 200 });
    const aborted = local.aborted;
    const response = await safeFetch(`http://api.test:${local.port}/stall`);
    expect(response.status).toBe(200);
    await expect.poll(() => local.aborted, { timeout: 1000 }).toBe(aborted + 1);
  });

  it("end the whole exchange at timeoutMs: a resolver that never answers", async () => {
    const safeFetch = createSafeFetch({ rules: ["slow.test"], resolve: () => new Promise(() => {}), timeoutMs: 200 });
    const { error, ms } = await refusal(safeFetch("http://slow.test/"));
    expect(error.check).toBe("dns");
    expect(ms).toBeLessThan(1000);
    // A time-out tells a guest nothing the time it took did not: it is shown as it is.
    expect(error.forGuest).toBeUndefined();
  });

  it("leave the caller's own abort signal working", async () => {
    const { safeFetch } = safeFetchFor();
    const controller = new AbortController();
    const pending = safeFetch(`http://api.test:${local.port}/hang`, { signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    await expect(pending).rejects.toMatchObject({ name: "AbortError" });
  });
});

function optionsFor(): Partial<SafeFetchOptions> {
  return {
    internalOrigins: [`http://api.test:${local.port}`],
    resolve: async () => ["127.0.0.1"],
  };
}

describe("an upstream's status line", () => {
  /** A raw TCP upstream that answers every request with `head` and a 2-byte body "ok". */
  async function answering(head: Buffer) {
    const server = net.createServer((socket) => {
      socket.on("error", () => {});
      socket.once("data", () => socket.end(Buffer.concat([head, Buffer.from("\r\ncontent-length: 2\r\n\r\nok")])));
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const port = (server.address() as net.AddressInfo).port;
    const safeFetch = createSafeFetch({ rules: [`127.0.0.1:${port}`], internalOrigins: [`http://127.0.0.1:${port}`] });
    return { url: `http://127.0.0.1:${port}/`, safeFetch, close: () => new Promise((resolve) => server.close(resolve)) };
  }

  it("with an obs-text byte in the reason phrase (legal, not UTF-8) is answered, the phrase read as empty", async () => {
    const upstream = await answering(Buffer.concat([Buffer.from("HTTP/1.1 200 W"), Buffer.from([0xe9]), Buffer.from("ird")]));
    try {
      const response = await upstream.safeFetch(upstream.url);
      expect(response.status).toBe(200);
      expect(response.statusText).toBe("");
      expect(await response.text()).toBe("ok");
    } finally {
      await upstream.close();
    }
  });

  it("keeps a reason phrase a Response can carry, obs-text that decoded to latin1 included", async () => {
    const upstream = await answering(Buffer.from("HTTP/1.1 201 Caf\u00c3\u00a9 ok", "latin1"));
    try {
      const response = await upstream.safeFetch(upstream.url);
      expect([response.status, response.statusText]).toEqual([201, "Caf\u00e9 ok"]);
      await response.body?.cancel();
    } finally {
      await upstream.close();
    }
  });

  it("with a status a Response cannot carry is refused, naming the status", async () => {
    const upstream = await answering(Buffer.from("HTTP/1.1 600 Beyond"));
    try {
      const { error } = await refusal(upstream.safeFetch(upstream.url));
      expect(error.check).toBe("response");
      expect(error.message).toContain("status 600");
    } finally {
      await upstream.close();
    }
  });

  it.each(["000", "099", "99"])("with status %s is refused as a status, not undici's internal assertion", async (status) => {
    const upstream = await answering(Buffer.from(`HTTP/1.1 ${status} Low`));
    try {
      const { error } = await refusal(upstream.safeFetch(upstream.url));
      expect([error.check, error.message]).toEqual(["response", expect.stringContaining("a status below 100")]);
    } finally {
      await upstream.close();
    }
  });
});

describe("what a guest is shown of a name's refusal (forGuest)", () => {
  const shown = (host: string) =>
    `egress refused: "${host}" has no public address: it does not resolve, or resolves to an address that is not public (http://${host} is not in internalOrigins)`;

  it("is one refusal for a missing name, an empty answer, a resolver's error and a special address; the caller keeps the detail", async () => {
    const { resolve } = tableResolver({ "inside.test": ["10.0.0.7"], "empty.test": [], "odd.test": ["not-an-address"] });
    const failing = async (host: string) =>
      host === "broken.test" ? Promise.reject(Object.assign(new Error("x"), { code: "ESERVFAIL" })) : resolve(host);
    const safeFetch = createSafeFetch({ rules: ["*"], resolve: failing });
    const details: Record<string, RegExp> = {
      "inside.test": /"inside\.test" resolves to an address that is private/,
      "gone.test": /resolving "gone\.test" failed \(ENOTFOUND\)/,
      "empty.test": /no A or AAAA records/,
      "odd.test": /answered "not-an-address"/,
      "broken.test": /ESERVFAIL/,
    };
    for (const [host, detail] of Object.entries(details)) {
      const { error } = await refusal(safeFetch(`http://${host}/`));
      expect(error.message, host).toMatch(detail);
      expect(error.forGuest, host).toEqual({ check: "address", message: shown(host) });
    }
  });

  it("is the detail itself for an address literal (the guest wrote it) and for an exempt origin (the deployment's own)", async () => {
    const { resolve } = tableResolver({});
    const safeFetch = createSafeFetch({ rules: ["*"], resolve, internalOrigins: ["http://gone.test"] });
    const literal = await refusal(safeFetch("http://10.0.0.7/"));
    expect([literal.error.message, literal.error.forGuest]).toEqual([expect.stringContaining("10.0.0.7 is private"), undefined]);
    const exempt = await refusal(safeFetch("http://gone.test/"));
    expect([exempt.error.message, exempt.error.forGuest]).toEqual([expect.stringContaining("ENOTFOUND"), undefined]);
  });
});

describe("headers that override a route", () => {
  const routed = () => [{ host: "api.test", port: local.port, routes: [{ path: "/echo", methods: ["GET"] }] }];

  it.each(["x-http-method-override", "X-HTTP-Method", "x-method-override", "x-original-url", "x-rewrite-url"])(
    "refuse %s under a rule with routes, before connecting",
    async (name) => {
      const { safeFetch } = safeFetchFor({ rules: routed() });
      const before = local.connections;
      const { error } = await refusal(safeFetch(`http://api.test:${local.port}/echo`, { headers: { [name]: "/admin" } }));
      expect([error.check, error.message]).toEqual([
        "rule",
        expect.stringContaining(`header "${name.toLowerCase()}" can make a server`),
      ]);
      expect(local.connections).toBe(before);
    },
  );

  it("go where the host's rule has no routes, and other headers go under routes", async () => {
    const open = safeFetchFor();
    const sent = await echoOf(
      await open.safeFetch(`http://api.test:${local.port}/echo`, { headers: { "x-http-method-override": "DELETE" } }),
    );
    expect(sent.headers["x-http-method-override"]).toBe("DELETE");
    const { safeFetch } = safeFetchFor({ rules: routed() });
    const other = await echoOf(
      await safeFetch(`http://api.test:${local.port}/echo`, { headers: { "x-forwarded-for": "1.2.3.4" } }),
    );
    expect(other.headers["x-forwarded-for"]).toBe("1.2.3.4");
  });
});

describe("header hygiene", () => {
  it.each([
    ["CRLF in a value", [["x-a", "b\r\nInjected: 1"]]],
    ["LF at the end of a value", [["x-a", "b\n"]]],
    ["NUL in a value", { "x-a": "b\0c" }],
    ["CR in a name", [["x-a\r", "b"]]],
  ])("refuse %s before connecting", async (_, headers) => {
    const { safeFetch } = safeFetchFor();
    const before = local.connections;
    const { error } = await refusal(
      safeFetch(`http://api.test:${local.port}/echo`, { headers: headers as RequestInit["headers"] }),
    );
    expect(error.check).toBe("headers");
    expect(local.connections).toBe(before);
  });

  it.each([
    ["DEL", "v\x7fw", "0x7f"],
    ["SOH", "v\x01w", "0x01"],
    ["ESC", "\x1b[31m", "0x1b"],
  ])("refuse a value with %s (Headers lets it in; undici failed as it sent) before connecting", async (_, value, code) => {
    const { safeFetch } = safeFetchFor();
    const before = local.connections;
    // Headers itself takes these: the refusal is the egress's, not the caller's own Headers.
    expect(new Headers({ "x-a": value }).get("x-a")).toBe(value);
    const { error } = await refusal(safeFetch(`http://api.test:${local.port}/echo`, { headers: new Headers({ "x-a": value }) }));
    expect([error.check, error.message]).toEqual(["headers", expect.stringContaining(`"x-a" has a control character (${code})`)]);
    expect(local.connections).toBe(before);
  });

  it("sends a value with a tab and obs-text as it is", async () => {
    const { safeFetch } = safeFetchFor();
    const response = await safeFetch(`http://api.test:${local.port}/echo`, { headers: { "x-a": "a\tb", "x-b": "caf\u00e9" } });
    const seen = await echoOf(response);
    expect(seen.headers["x-a"]).toBe("a\tb");
    expect(seen.headers["x-b"]).toBe("caf\u00e9");
  });
});

describe("options", () => {
  it.each([
    [{ rules: "api.test" }, /rules must be an array/],
    [{ rules: ["a b"] }, /rules\[0\]/],
    [{ rules: [], maxRedirects: -1 }, /maxRedirects/],
    [{ rules: [], timeoutMs: 0 }, /timeoutMs/],
    [{ rules: [], internalOrigins: ["http://127.0.0.1:1/path"] }, /internalOrigins\[0\]/],
    [{ rules: [], internalOrigins: ["ftp://127.0.0.1:1"] }, /internalOrigins\[0\]/],
    [{ rules: [], allow: [{ host: "x" }] }, /allow/],
  ])("are validated up front (%j)", (options, message) => {
    expect(() => createSafeFetch(options as unknown as SafeFetchOptions)).toThrow(message);
  });

  it("narrow rules by the ceiling (`allow`)", async () => {
    const safeFetch = createSafeFetch({
      ...optionsFor(),
      allow: [`api.test:${local.port}`],
      rules: ["*", `evil.test:${local.port}`],
    });
    expect((await safeFetch(`http://api.test:${local.port}/echo`)).status).toBe(200);
    await expect(safeFetch(`http://evil.test:${local.port}/echo`)).rejects.toMatchObject({ check: "rule" });
  });
});
