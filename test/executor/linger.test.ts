import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LINGER_BYTES } from "../../src/executor/linger.js";
import { SECRET, startExecutor, type TestExecutor } from "./helpers.js";

const MiB = 1024 * 1024;

/** A raw connection to the executor: what it received, whether a write failed, when it closed. */
function open(url: string): { socket: Socket; received: () => string; failed: () => string | undefined; closed: Promise<void> } {
  const { port } = new URL(url);
  // allowHalfOpen: as undici does, go on writing the body after the server's FIN.
  const socket = connect({ port: Number(port), host: "127.0.0.1", allowHalfOpen: true });
  let text = "";
  let failure: string | undefined;
  socket.on("data", (chunk) => {
    text += chunk.toString("latin1");
  });
  socket.on("error", (error: NodeJS.ErrnoException) => {
    failure = error.code;
  });
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return { socket, received: () => text, failed: () => failure, closed };
}

function head(length: number | "chunked"): string {
  const framing = length === "chunked" ? "transfer-encoding: chunked" : `content-length: ${length}`;
  return `POST /run HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${SECRET}\r\ncontent-type: application/json\r\n${framing}\r\n\r\n`;
}

describe("closing a connection after a refused upload (maxBodyMb: 1)", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor({ maxBodyMb: 1 });
  });
  afterAll(() => t.executor.close());

  it("keeps reading a client that goes on writing after the 413: it gets the answer, not a reset", async () => {
    // why: closing with upload bytes unread sends an RST, and a client still writing its body
    // saw EPIPE instead of the answer (fetch: "fetch failed"). 3 MiB in 64 KiB writes, each
    // waited for, so the server answers midway and the writes go on past the answer.
    const client = open(t.url);
    client.socket.write(head(3 * MiB));
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    for (let sent = 0; sent < 3 * MiB && client.failed() === undefined; sent += chunk.length) {
      await new Promise<void>((resolve) => client.socket.write(chunk, () => setTimeout(resolve, 1)));
    }
    expect(client.failed()).toBeUndefined();
    client.socket.end();
    await client.closed;
    expect(client.failed()).toBeUndefined();
    expect(client.received()).toMatch(/^HTTP\/1\.1 413 /);
    expect(client.received()).toContain("ERR_BODY_TOO_LARGE");
  });

  it("stops reading a client that never stops: the connection closes after a bounded amount", async () => {
    const client = open(t.url);
    client.socket.write(head("chunked"));
    const chunk = Buffer.alloc(256 * 1024, 0x20);
    const frame = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")]);
    let sent = 0;
    while (!client.socket.destroyed && sent < 64 * MiB) {
      const ok = client.socket.write(frame);
      sent += frame.length;
      if (!ok) {
        const drained = await Promise.race([
          new Promise<boolean>((resolve) => client.socket.once("drain", () => resolve(true))),
          client.closed.then(() => false),
        ]);
        if (!drained) break;
      }
    }
    await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 413 /);
    // The cap, the linger's bound, and what socket buffers hold in flight.
    expect(sent).toBeLessThan(1 * MiB + LINGER_BYTES + 16 * MiB);
  });

  it("serves no request pipelined behind a refused upload", async () => {
    // The pipelined request carries a wrong secret: served, it would be logged as a 401 at once.
    const client = open(t.url);
    const big = "x".repeat(1.5 * MiB);
    const second = JSON.stringify({ code: "export default () => 'PIPELINED'" });
    const refusedBefore = t.logs.filter((line) => line.event === "refused").length;
    client.socket.write(
      `${head("chunked")}${big.length.toString(16)}\r\n${big}\r\n0\r\n\r\n` +
        `${head(Buffer.byteLength(second)).replace(SECRET, "wrong-secret")}${second}`,
    );
    client.socket.once("end", () => client.socket.end());
    await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 413 /);
    expect(client.received()).not.toContain("401");
    const refused = t.logs.filter((line) => line.event === "refused").slice(refusedBefore);
    expect(refused.map((line) => line.status)).toEqual([413]);
  });

  it("reads no body a route does not take, with no secret: GET /health or a 404 with an endless upload closes soon", async () => {
    // why: Node read and discarded such a body to keep the connection, for as long as the
    // client sent (up to the request timeout): 63 MB in 8 s to /health, still reading.
    for (const [method, path] of [
      ["GET", "/health"],
      ["POST", "/nope"],
    ]) {
      const client = open(t.url);
      client.socket.write(`${method} ${path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100000000000\r\n\r\n`);
      const chunk = Buffer.alloc(256 * 1024, 0x20);
      let sent = 0;
      while (!client.socket.destroyed && sent < 64 * MiB) {
        const ok = client.socket.write(chunk);
        sent += chunk.length;
        if (!ok) {
          const drained = await Promise.race([
            new Promise<boolean>((resolve) => client.socket.once("drain", () => resolve(true))),
            client.closed.then(() => false),
          ]);
          if (!drained) break;
        }
      }
      client.socket.destroy();
      await client.closed;
      expect(client.received(), path).toMatch(/^HTTP\/1\.1 (200|404) /);
      expect(client.received(), path).toMatch(/connection: close/i);
      // The linger's bound, and what socket buffers hold in flight.
      expect(sent, path).toBeLessThan(LINGER_BYTES + 16 * MiB);
    }
  });

  it("serves the next connection as usual", async () => {
    expect(await t.runResult({ code: "export default () => 'after'" })).toMatchObject({ status: "completed", value: "after" });
  });
});
