import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SECRET, startExecutor, type TestExecutor } from "./helpers.js";

let t: TestExecutor;
beforeAll(async () => {
  t = await startExecutor();
});
afterAll(() => t.executor.close({ graceMs: 0 }));

async function activeRuns(): Promise<number> {
  const health = (await (await fetch(`${t.url}/health`)).json()) as { load: { activeRuns: number } };
  return health.load.activeRuns;
}

describe("a client that never reads its answer", () => {
  it("loses its connection once the answer has made no progress for 10 s; the run no longer counts", async () => {
    // An answer larger than the sockets' buffers on loopback, so most of it waits on the service.
    const body = JSON.stringify({ code: "export default () => 'x'.repeat(14 * 1024 * 1024)" });
    const socket = connect(Number(new URL(t.url).port), "127.0.0.1");
    socket.on("error", () => {});
    let received = 0;
    socket.on("data", (chunk: Buffer) => {
      received += chunk.length;
    });
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    socket.on("connect", () => {
      socket.write(
        `POST /run HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${SECRET}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
      socket.pause();
    });
    // Its run completed and its answer is written, but stuck: with no bound it held activeRuns
    // (and a graceful shutdown) for as long as the client kept the socket open.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect(await activeRuns()).toBe(1);
    const stuckAt = performance.now();
    while ((await activeRuns()) > 0 && performance.now() - stuckAt < 25_000)
      await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await activeRuns()).toBe(0);
    expect(performance.now() - stuckAt).toBeLessThan(20_000);
    expect(t.logs.some((line) => line.event === "response-stalled")).toBe(true);
    // The service closed the connection: reading now finds its end, short of the whole answer.
    socket.resume();
    await closed;
    expect(received).toBeLessThan(14 * 1024 * 1024);
    socket.destroy();
  }, 40_000);
});
