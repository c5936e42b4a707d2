import { connect } from "node:net";
import { describe, expect, it } from "vitest";
import { Bindings } from "../../src/core/bindings.js";
import { HEADERS_TIMEOUT_MS } from "../../src/core/http-timeouts.js";
import { Callbacks } from "../../src/hosts/remote/callbacks.js";

/**
 * The remote host's callback server (cordon's own, in the caller's process) bounds how long a
 * request may take to arrive, as the executor does. Found by a red-team pass: with Node's
 * defaults, 1,000 sockets each trickling a header line every 5 s (no grant needed) were all still
 * open 95 s later, holding file descriptors of the application's process.
 */
describe("the remote host's callback server", () => {
  it("ends a connection whose request head trickles in, after the executor's head timeout", async () => {
    const callbacks = new Callbacks();
    try {
      const registration = await callbacks.register(new Bindings({ f: async () => 1 }), "tenant", 60_000);
      const { hostname, port } = new URL(registration?.callback.url as string);
      const started = performance.now();
      const endedAfter = await new Promise<number>((resolve, reject) => {
        const socket = connect(Number(port), hostname, () => socket.write(`POST / HTTP/1.1\r\nhost: ${hostname}\r\n`));
        // A header line every 2 s: each one arrives well inside any per-line idle timeout.
        const trickle = setInterval(() => socket.write(`x-slow-${Math.round(performance.now())}: 1\r\n`), 2000);
        const giveUp = setTimeout(() => {
          clearInterval(trickle);
          socket.destroy();
          resolve(Number.POSITIVE_INFINITY);
        }, HEADERS_TIMEOUT_MS + 8000);
        socket.on("error", () => {});
        socket.on("close", () => {
          clearInterval(trickle);
          clearTimeout(giveUp);
          resolve(performance.now() - started);
        });
        socket.on("timeout", () => reject(new Error("unexpected")));
      });
      // Node checks every second: ended between the timeout and a few seconds past it.
      expect(endedAfter).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS - 100);
      expect(endedAfter).toBeLessThan(HEADERS_TIMEOUT_MS + 6000);
    } finally {
      await callbacks.close();
    }
  }, 30_000);
});
