import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createExecutor } from "../../src/executor/server.js";
import { startExecutor, type TestExecutor } from "./helpers.js";

/** A raw connection, open once connected. */
function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => resolve(socket));
    socket.on("error", reject);
  });
}

/** What the server wrote before closing, or "open" if it is still open after `ms`. */
function closedWithin(socket: Socket, ms: number): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    const timer = setTimeout(() => resolve("open"), ms);
    socket.on("data", (chunk) => {
      text += chunk;
    });
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(`closed:${text}`);
    });
    socket.on("error", () => {});
  });
}

/** GET /health on its own connection, closed after the answer. */
function health(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write("GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"));
    let text = "";
    socket.on("data", (chunk) => {
      text += chunk;
    });
    socket.on("close", () => resolve(text));
    socket.on("error", reject);
  });
}

describe("the service's connection cap", () => {
  let t: TestExecutor;
  let port: number;
  beforeAll(async () => {
    t = await startExecutor({ maxConnections: 3 });
    port = Number(new URL(t.url).port);
  });
  afterAll(() => t.executor.close({ graceMs: 0 }));

  it("closes connections past maxConnections at once, logs it, and serves again once one goes", async () => {
    // Idle clients holding connections (each a descriptor): without a cap they exhausted the service's.
    const held = await Promise.all([open(port), open(port), open(port)]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const extra = await open(port);
    expect(await closedWithin(extra, 2_000)).toBe("closed:");
    const full = t.logs.filter((line) => line.event === "connections-full");
    expect(full.length).toBe(1);
    expect(full[0]).toMatchObject({ maxConnections: 3, dropped: 1 });
    held[0].destroy();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await health(port)).toMatch(/^HTTP\/1\.1 200 /);
    for (const socket of held) socket.destroy();
  });

  it("refuses a cap that is not a whole positive number", async () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      await expect(createExecutor({ port: 0, maxConnections: bad, logger: false })).rejects.toThrow(/maxConnections/);
    }
  });
});
