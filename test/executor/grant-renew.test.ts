import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bindings } from "../../src/core/bindings.js";
import type { RemoteCallback } from "../../src/core/protocol.js";
import { CallbackBindings } from "../../src/executor/callback-bindings.js";
import { createRpcHandler, type RpcHandler } from "../../src/index.js";
import { DEFAULT_LIMITS } from "../../src/core/limits.js";
import { SECRET, hostRunBody, refusal, startExecutor } from "./helpers.js";

/**
 * A prefix's requests each bring a grant, and they overlap and may arrive out of order. The
 * executor keeps the grant that expires last (one that expires sooner, arriving last, cut the
 * other calls' host functions off), and refuses a grant for any other run.
 */
describe("the executor renewing a prefix's grant", () => {
  let server: Server;
  let url: string;
  let rpc: RpcHandler;
  beforeAll(async () => {
    rpc = createRpcHandler({ key: "k".repeat(32) });
    server = createServer(async (request, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const answer = await rpc.handle(
        new Request(`http://127.0.0.1${request.url}`, {
          method: "POST",
          headers: request.headers as Record<string, string>,
          body: Buffer.concat(chunks),
        }),
      );
      response.writeHead(answer.status, { "content-type": "application/json" }).end(await answer.text());
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /** A scoped (prefix) registration of one function, `globals.ping`, and the callback for it. */
  function prefixRegistration(ttlMs: number) {
    const bindings = new Bindings({ ping: async () => "pong" });
    const names = new Map([["globals.ping", 0]]);
    const registered = rpc.register(bindings, names, { subject: "t", ttlMs, scoped: true });
    const callback = (grant: string): RemoteCallback => ({ url, run: registered.run, grant, names: ["globals.ping"] });
    return { registered, callback };
  }

  it("keeps the grant that expires last when a sooner-expiring one arrives after it", async () => {
    const { registered, callback } = prefixRegistration(5);
    const held = new CallbackBindings("{}", callback(registered.grant));
    const long = rpc.renew(registered.run, 60_000) as string;
    const short = rpc.renew(registered.run, 1) as string;
    // The long request's grant arrives first, the short one's last.
    expect(held.renew(callback(long))).toBeUndefined();
    expect(held.renew(callback(short))).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await held.dispatch(0, "[]")).toEqual({ ok: true, text: '"pong"' });
    registered.unregister();
  });

  it("takes a later-expiring grant over the one it holds", async () => {
    const { registered, callback } = prefixRegistration(1);
    const held = new CallbackBindings("{}", callback(registered.grant));
    expect(held.renew(callback(rpc.renew(registered.run, 60_000) as string))).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await held.dispatch(0, "[]")).toEqual({ ok: true, text: '"pong"' });
    registered.unregister();
  });

  it("refuses a grant for another run, another URL or other names, and one whose claims name another run", () => {
    const mine = prefixRegistration(60_000);
    const other = prefixRegistration(60_000);
    const held = new CallbackBindings("{}", mine.callback(mine.registered.grant));
    const later = rpc.renew(other.registered.run, 120_000) as string;
    expect(held.renew(other.callback(later))).toMatch(/another run/);
    expect(held.renew({ ...mine.callback(later), url: "http://127.0.0.1:1/" })).toMatch(/another run/);
    expect(held.renew({ ...mine.callback(later), names: ["globals.other"] })).toMatch(/another run/);
    // The run id is the prefix's, the grant is another run's (and expires later): still refused.
    expect(held.renew(mine.callback(later))).toMatch(/not a grant for callback.run/);
    expect(held.renew(mine.callback("not-a-grant"))).toMatch(/not a grant for callback.run/);
    // A prefix prepared without host functions takes no callback at all.
    expect(new CallbackBindings("{}", undefined).renew(mine.callback(mine.registered.grant))).toMatch(/without host functions/);
    mine.registered.unregister();
    other.registered.unregister();
  });

  it("answers a prefix request carrying another run's grant with ERR_BAD_REQUEST", async () => {
    const service = await startExecutor({ sandbox: { host: "inprocess", engine: "v8" } });
    try {
      const mine = prefixRegistration(60_000);
      const other = prefixRegistration(60_000);
      const post = (body: unknown) =>
        fetch(`${service.url}/host`, {
          method: "POST",
          headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      const { source, sourceImports } = await hostRunBody("export function f() { return 1 }");
      const prepared = await post({
        engine: "v8",
        t: "prepare",
        key: "k",
        source,
        sourceImports,
        bindingsText: JSON.stringify({ globals: {}, modules: {} }),
        limits: DEFAULT_LIMITS,
        callback: mine.callback(mine.registered.grant),
      });
      expect(prepared.status).toBe(200);
      const handle = prepared.headers.get("cordon-prefix");
      expect(handle).toBeTruthy();
      const call = (callback: RemoteCallback) =>
        post({ engine: "v8", t: "prefix-call", prefix: handle, path: "f", argsText: "[]", limits: DEFAULT_LIMITS, callback });
      const refused = await refusal(await call(other.callback(other.registered.grant)));
      expect(refused).toMatchObject({ status: 400, code: "ERR_BAD_REQUEST" });
      expect(refused.message).toMatch(/another run/);
      expect((await call(mine.callback(rpc.renew(mine.registered.run, 60_000) as string))).status).toBe(200);
    } finally {
      await service.executor.close({ graceMs: 0 });
    }
  }, 30_000);
});
