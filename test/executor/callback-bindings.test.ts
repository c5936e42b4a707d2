import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CallbackBindings } from "../../src/executor/callback-bindings.js";

/**
 * The executor calls a remote run's host functions back over HTTP. An answer longer than the run's
 * maxBridgeCallBytes ends the run; it must not be buffered first (a host streaming 400 MB made
 * the executor hold all of it).
 */
describe("CallbackBindings and the run's maxBridgeCallBytes", () => {
  let server: Server;
  let url: string;
  let sent = 0;
  let bodies: unknown[] = [];
  let asked: unknown[] = [];
  beforeAll(async () => {
    server = createServer((request, response) => {
      let body = "";
      request.on("data", (chunk) => {
        body += chunk;
      });
      request.on("end", () => {
        bodies.push(JSON.parse(body));
        asked.push(request.headers["x-cordon-answer"]);
        // A host that answers with its kind and text (core/protocol.ts: CALLBACK_ANSWER_HEADER).
        const kind = /^\/text-(ok|error|too-large|weird)$/.exec(request.url ?? "")?.[1];
        if (kind) {
          response.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
          response.end(`${kind}\n${kind === "too-large" ? "" : '"é"'}`);
          return;
        }
        if (request.url === "/small") {
          response.end(JSON.stringify({ ok: true, text: '"fine"' }));
          return;
        }
        if (request.url === "/refused") {
          response.end(JSON.stringify({ ok: false, text: "", tooLarge: true }));
          return;
        }
        // An endless answer: 1 MB chunks until the client goes away (as JSON, or as its own text).
        const asText = request.url === "/text-endless";
        response.writeHead(200, { "content-type": asText ? "text/plain" : "application/json" });
        const chunk = "x".repeat(1024 * 1024);
        response.write(asText ? 'ok\n"' : '{"ok":true,"text":"');
        const more = () => {
          while (!response.destroyed && sent < 2_000) {
            sent++;
            if (!response.write(chunk)) return void response.once("drain", more);
          }
          response.end('"}');
        };
        more();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const bindingsFor = (path: string) =>
    new CallbackBindings('{"globals":{},"modules":{}}', { url: `${url}${path}`, grant: "g", run: "r", names: ["f"] });

  it("stops reading an answer past the limit and says tooLarge", async () => {
    bodies = [];
    sent = 0;
    const answer = await bindingsFor("/endless").dispatch(0, "[]", undefined, 1_000_000);
    expect(answer).toMatchObject({ ok: false, tooLarge: true });
    // The limit went with the call, and far less than the 2 GB the host would stream was read.
    expect(bodies[0]).toMatchObject({ name: "f", maxBytes: 1_000_000 });
    expect(sent).toBeLessThan(100);
  });

  it("stops reading an answer sent as its own text past the limit", async () => {
    sent = 0;
    const answer = await bindingsFor("/text-endless").dispatch(0, "[]", undefined, 1_000_000);
    expect(answer).toMatchObject({ ok: false, tooLarge: true });
    expect(sent).toBeLessThan(100);
  });

  it("asks for the answer as its own text, and reads each kind of it", async () => {
    asked = [];
    expect(await bindingsFor("/text-ok").dispatch(0, "[]", undefined, 1_000)).toEqual({ ok: true, text: '"é"' });
    expect(await bindingsFor("/text-error").dispatch(0, "[]", undefined, 1_000)).toEqual({ ok: false, text: '"é"' });
    expect(await bindingsFor("/text-too-large").dispatch(0, "[]", undefined, 1_000)).toMatchObject({ tooLarge: true });
    expect(asked).toEqual(["text", "text", "text"]);
    // A kind it does not know is no answer: the guest's call fails, and says so.
    const weird = await bindingsFor("/text-weird").dispatch(0, "[]", undefined, 1_000);
    expect(weird.ok).toBe(false);
    expect(weird.text).toContain("not a bridge answer");
  });

  it("passes on a host's tooLarge, and an answer within the limit", async () => {
    expect(await bindingsFor("/refused").dispatch(0, "[]", undefined, 10)).toMatchObject({ tooLarge: true });
    expect(await bindingsFor("/small").dispatch(0, "[]", undefined, 1_000)).toEqual({ ok: true, text: '"fine"' });
  });
});
