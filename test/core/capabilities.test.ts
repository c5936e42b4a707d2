import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokeredFetch } from "../../src/capabilities.js";
import { sharedCodec } from "../../src/core/bindings.js";
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
