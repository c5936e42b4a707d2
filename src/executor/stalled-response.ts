import type { ServerResponse } from "node:http";

/**
 * A client that asks for a run and never reads its answer holds the connection, the answer's
 * bytes and a graceful shutdown (which waits for every answer to be out) for as long as it likes.
 * An answer that the client has not taken a byte of for this long is given up: its connection
 * is destroyed. A client that reads, however slowly, is never cut.
 */
export const RESPONSE_STALL_MS = 10_000;
/** How often an answer's progress is looked at. */
const CHECK_EVERY_MS = 1_000;

/**
 * Watch `response` until it closes: when bytes wait to be written (the client is not reading)
 * and none has left for `stallMs`, destroy its socket and call `onStall`.
 */
export function destroyWhenStalled(response: ServerResponse, onStall: () => void, stallMs = RESPONSE_STALL_MS): void {
  let pending = 0;
  let since = performance.now();
  const timer = setInterval(() => {
    const socket = response.socket;
    // Bytes the socket holds that the kernel has not taken: 0 while the run runs and once it is out.
    const now = socket?.writableLength ?? 0;
    if (now === 0 || now !== pending) {
      pending = now;
      since = performance.now();
      return;
    }
    if (performance.now() - since < stallMs) return;
    clearInterval(timer);
    socket?.destroy();
    onStall();
  }, CHECK_EVERY_MS);
  timer.unref();
  response.once("close", () => clearInterval(timer));
}
