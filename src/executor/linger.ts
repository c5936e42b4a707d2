import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";

/** How much of a refused upload is read and thrown away after the refusal, at most. */
export const LINGER_BYTES = 4 * 1024 * 1024;
/** How long a connection whose upload was refused stays open after the refusal, at most. */
export const LINGER_MS = 2_000;

/** Sockets closing after a refused upload: a request pipelined behind one is never served. */
const lingering = new WeakSet<Socket>();

/**
 * Close a connection whose upload was refused (413) without losing the refusal on the way.
 *
 * Node ends a `connection: close` answer with `socket.destroySoon()`: a FIN, then close() as soon
 * as the answer is flushed. With upload bytes still unread, close() sends an RST, and a client
 * still writing its body can see EPIPE or ECONNRESET before it reads the 413: fetch fails with
 * "fetch failed" and no word of the cap (seen in CI, under load). As nginx's lingering close
 * does: after the answer and the FIN, read and discard what the client still sends until it
 * closes (a fetch client closes as soon as it has read the answer), for at most `bytes` or `ms`,
 * then destroy the socket. Call before the answer is sent.
 */
export function lingerAfterRefusal(incoming: IncomingMessage, bytes = LINGER_BYTES, ms = LINGER_MS): void {
  const socket = incoming.socket as Socket | null;
  if (socket === null || socket.destroyed || lingering.has(socket)) return;
  lingering.add(socket);
  let discarded = 0;
  let timer: NodeJS.Timeout | undefined;
  const destroy = () => {
    clearTimeout(timer);
    socket.destroy();
  };
  incoming.on("data", (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > bytes) destroy();
  });
  incoming.resume();
  socket.once("close", () => clearTimeout(timer));
  // Node calls this once the answer is flushed; ending the writable side sends our FIN, the
  // client's FIN (or the bounds) then closes the socket.
  socket.destroySoon = function lingerThenDestroy(this: Socket) {
    if (this.writable) this.end();
    timer ??= setTimeout(destroy, ms);
    timer.unref();
  };
}

/** Whether `socket` is closing after a refused upload: nothing more is served on it. */
export function isLingering(socket: Socket | null): boolean {
  return socket !== null && lingering.has(socket);
}
