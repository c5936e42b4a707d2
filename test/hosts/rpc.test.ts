import { describe, expect, it } from "vitest";
import { Bindings, sharedCodec } from "../../src/core/bindings.js";
import { GrantError, signGrant, verifyGrant } from "../../src/hosts/remote/grant.js";
import { createRpcHandler } from "../../src/hosts/remote/rpc.js";

const KEY = "k".repeat(32);
const OTHER_KEY = "o".repeat(32);
const codec = sharedCodec();

function call(grant: string, body: Record<string, unknown>): Request {
  return new Request("http://host.test/rpc", {
    method: "POST",
    headers: { authorization: `Bearer ${grant}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

describe("grants", () => {
  const payload = { run: "r1", sub: "tenant-a", names: ["lookup"], exp: Date.now() + 60_000 };

  it("verify what was signed, and nothing else", () => {
    const grant = signGrant(KEY, payload);
    expect(verifyGrant(KEY, grant, { run: "r1", name: "lookup" })).toMatchObject({ run: "r1", sub: "tenant-a" });
    const reason = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        return error instanceof GrantError ? error.reason : "other";
      }
      return "accepted";
    };
    expect(reason(() => verifyGrant(OTHER_KEY, grant, { run: "r1" }))).toBe("signature");
    const [body, sig] = grant.split(".");
    const forged = Buffer.from(JSON.stringify({ ...payload, names: ["lookup", "deleteAll"] })).toString("base64url");
    expect(reason(() => verifyGrant(KEY, `${forged}.${sig}`, { run: "r1", name: "deleteAll" }))).toBe("signature");
    expect(reason(() => verifyGrant(KEY, `${body}.`, { run: "r1" }))).toBe("malformed");
    expect(reason(() => verifyGrant(KEY, "nonsense", { run: "r1" }))).toBe("malformed");
    expect(reason(() => verifyGrant(KEY, grant, { run: "r2" }))).toBe("run");
    expect(reason(() => verifyGrant(KEY, grant, { run: "r1", name: "deleteAll" }))).toBe("name");
    expect(reason(() => verifyGrant(KEY, grant, { run: "r1", now: payload.exp }))).toBe("expired");
  });

  it("refuses a key shorter than 32 bytes", () => {
    expect(() => signGrant("short", payload)).toThrow(/at least 32 bytes/);
  });
});

describe("createRpcHandler", () => {
  const lookup = async (id: number) => ({ id, name: "ada" });
  const remove = async () => "removed everything";
  const bindings = new Bindings({ lookup, remove });
  const names = new Map([["lookup", 0]]); // remove is bound on the host but not granted

  it("dispatches a granted name for its run", async () => {
    const rpc = createRpcHandler({ key: KEY });
    const { run, grant } = rpc.register(bindings, names, { subject: "tenant-a", ttlMs: 60_000 });
    const response = await rpc.handle(call(grant, { run, name: "lookup", argsText: codec.encode([7]) }));
    expect(response.status).toBe(200);
    const { ok, text } = (await response.json()) as { ok: boolean; text: string };
    expect(ok).toBe(true);
    expect(codec.decode(text)).toEqual({ id: 7, name: "ada" });
  });

  it("a prefix's (scoped) registration answers only while one of its requests is open, and stops what ended ones still do", async () => {
    const rpc = createRpcHandler({ key: KEY });
    let stopped = 0;
    const slow = new Bindings({
      lookup,
      wait: async () => new Promise(() => {}),
    });
    // The host function sees nothing of the signal, but a bridge call's signal is what the
    // brokered fetch stops on: watch it through a BindingsLike that records it.
    const watching = {
      text: slow.text,
      dispatch: (fnId: number, argsText: string, signal?: AbortSignal) => {
        signal?.addEventListener("abort", () => stopped++);
        return slow.dispatch(fnId, argsText, signal);
      },
    };
    const scopedNames = new Map([
      ["lookup", 0],
      ["wait", 1],
    ]);
    const { run, grant } = rpc.register(watching, scopedNames, { subject: "prefix", ttlMs: 60_000, scoped: true });
    const ask = () => rpc.handle(call(grant, { run, name: "lookup", argsText: codec.encode([1]) }));
    expect((await ask()).status).toBe(404);
    const fresh = rpc.renew(run, 60_000) as string;
    expect((await rpc.handle(call(fresh, { run, name: "lookup", argsText: codec.encode([1]) }))).status).toBe(200);
    const hanging = rpc.handle(call(fresh, { run, name: "wait", argsText: codec.encode([]) }));
    await new Promise((r) => setTimeout(r, 20));
    rpc.close(run);
    expect(stopped).toBe(1);
    expect((await rpc.handle(call(fresh, { run, name: "lookup", argsText: codec.encode([1]) }))).status).toBe(404);
    void hanging;
  });

  it("refuses what the grant does not cover, without calling anything", async () => {
    let removed = false;
    const guarded = new Bindings({ lookup, remove: async () => (removed = true) });
    const rpc = createRpcHandler({ key: KEY });
    const a = rpc.register(guarded, new Map([["lookup", 0]]), { subject: "tenant-a", ttlMs: 60_000 });
    const b = rpc.register(guarded, new Map([["lookup", 0]]), { subject: "tenant-b", ttlMs: 60_000 });
    const args = codec.encode([1]);
    expect((await rpc.handle(call(a.grant, { run: a.run, name: "remove", argsText: args }))).status).toBe(403);
    // A's grant presented for B's run: bound to one run.
    expect((await rpc.handle(call(a.grant, { run: b.run, name: "lookup", argsText: args }))).status).toBe(401);
    const forged = signGrant(OTHER_KEY, { run: a.run, sub: "x", names: ["remove"], exp: Date.now() + 1000 });
    expect((await rpc.handle(call(forged, { run: a.run, name: "remove", argsText: args }))).status).toBe(401);
    expect((await rpc.handle(new Request("http://host.test/rpc", { method: "POST", body: "{}" }))).status).toBe(401);
    a.unregister();
    expect((await rpc.handle(call(a.grant, { run: a.run, name: "lookup", argsText: args }))).status).toBe(404);
    expect(removed).toBe(false);
  });

  it("reads no body before the grant verifies and its run is open", async () => {
    // Anyone who can reach the callback server could make it buffer and parse 64 MB per request.
    const rpc = createRpcHandler({ key: KEY });
    const a = rpc.register(bindings, names, { subject: "tenant-a", ttlMs: 60_000 });
    let pulled = 0;
    const body = () =>
      new ReadableStream({
        pull(controller) {
          pulled++;
          controller.enqueue(new Uint8Array(1024 * 1024));
          if (pulled > 64) controller.close();
        },
      });
    const post = (grant: string) =>
      rpc.handle(
        new Request("http://host.test/rpc", {
          method: "POST",
          headers: { authorization: `Bearer ${grant}` },
          body: body(),
          duplex: "half",
        } as RequestInit),
      );
    const forged = signGrant(OTHER_KEY, { run: a.run, sub: "x", names: ["lookup"], exp: Date.now() + 60_000 });
    expect((await post(forged)).status).toBe(401);
    expect((await post("not-a-grant")).status).toBe(401);
    a.unregister();
    expect((await post(a.grant)).status).toBe(404);
    expect(pulled).toBeLessThanOrEqual(3);
  });

  it("an expired grant is worth nothing", async () => {
    const rpc = createRpcHandler({ key: KEY });
    const { run, grant } = rpc.register(bindings, names, { subject: "tenant-a", ttlMs: 1 });
    await new Promise((r) => setTimeout(r, 10));
    expect((await rpc.handle(call(grant, { run, name: "lookup", argsText: codec.encode([1]) }))).status).toBe(401);
  });
});

describe("createRpcHandler's answer as its own text", () => {
  const asText = (grant: string, body: Record<string, unknown>) => {
    const request = call(grant, body);
    request.headers.set("x-cordon-answer", "text");
    return request;
  };

  it("answers an executor that asks with the answer's kind, a line feed, then its codec text", async () => {
    const fails = async () => {
      throw new TypeError("no such user");
    };
    const big = async () => "z".repeat(200_000);
    const rpc = createRpcHandler({ key: KEY });
    const names = new Map([
      ["lookup", 0],
      ["fails", 1],
      ["big", 2],
    ]);
    const { run, grant } = rpc.register(new Bindings({ lookup: async (id: number) => ({ id }), fails, big }), names, {
      subject: "t",
      ttlMs: 60_000,
    });
    const read = async (response: Response) => {
      const body = await response.text();
      const lineEnd = body.indexOf("\n");
      return { status: response.status, kind: body.slice(0, lineEnd), text: body.slice(lineEnd + 1) };
    };
    const ok = await read(await rpc.handle(asText(grant, { run, name: "lookup", argsText: codec.encode([7]) })));
    expect([ok.status, ok.kind]).toEqual([200, "ok"]);
    expect(codec.decode(ok.text)).toEqual({ id: 7 });
    const error = await read(await rpc.handle(asText(grant, { run, name: "fails", argsText: codec.encode([]) })));
    expect(error.kind).toBe("error");
    expect(codec.decode(error.text)).toMatchObject({ name: "TypeError", message: "no such user" });
    const refused = await rpc.handle(asText(grant, { run, name: "big", argsText: codec.encode([]), maxBytes: 100_000 }));
    expect(await refused.text()).toBe("too-large\n");
    // Refusals are JSON whatever was asked: they are no answer.
    const denied = await rpc.handle(asText(grant, { run, name: "remove", argsText: codec.encode([]) }));
    expect(denied.status).toBe(403);
    expect(await denied.json()).toMatchObject({ error: expect.any(String) });
  });
});

describe("createRpcHandler and the run's maxBridgeCallBytes", () => {
  it("an answer longer than the caller's maxBytes is refused as tooLarge, not sent", async () => {
    const big = async () => "z".repeat(200_000);
    const rpc = createRpcHandler({ key: KEY });
    const { run, grant } = rpc.register(new Bindings({ big }), new Map([["big", 0]]), { subject: "t", ttlMs: 60_000 });
    const refused = await rpc.handle(call(grant, { run, name: "big", argsText: codec.encode([]), maxBytes: 100_000 }));
    const text = await refused.text();
    expect(text.length).toBeLessThan(200);
    expect(JSON.parse(text)).toEqual({ ok: false, text: "", tooLarge: true });
    // Without a limit (or within it) the answer is sent.
    const sent = await rpc.handle(call(grant, { run, name: "big", argsText: codec.encode([]), maxBytes: 300_000 }));
    expect(codec.decode(((await sent.json()) as { text: string }).text)).toHaveLength(200_000);
  });
});
