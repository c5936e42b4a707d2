import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type Socket } from "node:net";
import { refusal, SECRET, startExecutor, type TestExecutor } from "./helpers.js";

const MiB = 1024 * 1024;

describe("the body cap (maxBodyMb: 1)", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor({ maxBodyMb: 1 });
  });
  afterAll(() => t.executor.close());

  it("takes a body just under the cap", async () => {
    const head = JSON.stringify({ code: "export default () => 'big'\n//" });
    const padding = "x".repeat(MiB - head.length - 16);
    const body = JSON.stringify({ code: `export default () => 'big'\n//${padding}` });
    expect(body.length).toBeLessThan(MiB);
    expect(await t.runResult(body)).toMatchObject({ status: "completed", value: "big" });
  });

  it("refuses a body one byte over the cap with a 413", async () => {
    const body = JSON.stringify({ code: "return 1", input: "y".repeat(MiB) }).slice(0, MiB + 1);
    expect(Buffer.byteLength(body)).toBe(MiB + 1);
    expect(await refusal(await t.run(body))).toMatchObject({ status: 413, code: "ERR_BODY_TOO_LARGE" });
  });

  it("refuses a 50 MB streamed body (no content-length) while it streams, long before it ends", async () => {
    // why: the 413 must come from counting bytes as they arrive; a server that buffered first
    // would read all 50 MB before answering. The stream records how much was ever pulled from it.
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (pulled >= 50 * 1_000_000) return controller.close();
        pulled += 64 * 1024;
        controller.enqueue(new Uint8Array(64 * 1024).fill(0x20));
      },
    });
    const response = await fetch(`${t.url}/run`, {
      method: "POST",
      headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
      body,
      duplex: "half",
    } as RequestInit);
    expect(response.headers.get("content-length")).not.toBeNull();
    expect(await refusal(response)).toMatchObject({ status: 413, code: "ERR_BODY_TOO_LARGE" });
    // Socket buffers hold a few MiB in flight; what matters is that the upload stopped.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(pulled).toBeLessThan(20 * 1_000_000);
  });

  it("refuses a declared content-length over the cap before reading it, then serves the next request", async () => {
    const response = await fetch(`${t.url}/run`, {
      method: "POST",
      headers: { authorization: `Bearer ${SECRET}`, "content-length": String(5 * MiB) },
      body: "x".repeat(5 * MiB),
    });
    expect(response.status).toBe(413);
    expect(response.headers.get("connection")).toBe("close");
    const health = await fetch(`${t.url}/health`);
    expect(health.status).toBe(200);
  });
});

describe("the bytes of bodies held at once (maxBodyMb: 1, maxBufferedBodyMb: 2)", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor({ maxBodyMb: 1, maxBufferedBodyMb: 2 });
  });
  afterAll(() => t.executor.close());

  /** An admitted upload of 0.9 MiB declared, all but its last byte sent: held, unfinished. */
  async function holdUpload(): Promise<{ socket: Socket; received: () => string; closed: Promise<void> }> {
    const { port } = new URL(t.url);
    const socket = connect(Number(port), "127.0.0.1");
    let text = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      text += chunk;
    });
    socket.on("error", () => {});
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    const size = Math.floor(0.9 * MiB);
    socket.write(`POST /run HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${SECRET}\r\ncontent-length: ${size}\r\n\r\n`);
    socket.write(Buffer.alloc(size - 1, 0x20));
    return { socket, received: () => text, closed };
  }

  it("refuses an upload past the budget with ERR_CAPACITY, and takes uploads again once the held ones go", async () => {
    // why: each admitted upload could hold up to the body cap, with no bound across connections:
    // 30 uploads of 30 MB held 962 MB of the service.
    // Which of the three passes the budget depends on the order the server reads them in.
    const uploads = [await holdUpload(), await holdUpload(), await holdUpload()];
    const refused = await Promise.race(uploads.map((upload) => upload.closed.then(() => upload)));
    expect(refused.received()).toMatch(/^HTTP\/1\.1 503 /);
    expect(refused.received()).toContain("ERR_CAPACITY");
    const held = uploads.filter((upload) => upload !== refused);
    expect(held.map((upload) => upload.received())).toEqual(["", ""]);
    for (const upload of held) upload.socket.destroy();
    await Promise.all(held.map((upload) => upload.closed));
    expect(await t.runResult({ code: "export default () => 'after'" })).toMatchObject({ status: "completed", value: "after" });
    const fourth = await holdUpload();
    const fifth = await holdUpload();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(fourth.received() + fifth.received()).toBe("");
    fourth.socket.destroy();
    fifth.socket.destroy();
  });
});
