import type { IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { RequestError } from "@hono/node-server";
import { ServiceError } from "./errors.js";

/**
 * What hono's adapter refuses before any route sees it (no Host header in HTTP/1.0, a Host that
 * is not a host name, `OPTIONS *`) gets the service's refusal form, `ERR_BAD_REQUEST`, as the
 * routes' own refusals do; anything else that fails there is the executor's fault.
 */
export function answerRequestError(error: unknown): Response {
  const refusal =
    error instanceof RequestError
      ? new ServiceError("ERR_BAD_REQUEST", `the request cannot be served: ${error.message}`)
      : new ServiceError("ERR_INTERNAL", "the executor failed to answer this request");
  return Response.json(refusal.toJSON(), { status: refusal.status, headers: { connection: "close" } });
}

/**
 * What Node's HTTP parser refuses before any route sees it (malformed, headers over its 16 KB
 * limit, too slow to arrive) gets the service's refusal form too, with Node's status.
 */
export function answerClientError(error: NodeJS.ErrnoException, socket: Duplex): void {
  // A response owed on this connection for a request read whole (a run in flight, with garbage
  // pipelined behind it), or already begun: a 400 written now would be read as that answer, or
  // inside it. The connection just ends. A request that is itself broken (a bad chunk, a body
  // that stalls) gets its 400 or 408 as before: Node made its response object, unsent.
  const owed = (socket as Duplex & { _httpMessage?: { _headerSent?: boolean; req?: { complete?: boolean } } })._httpMessage;
  if (error.code === "ECONNRESET" || !socket.writable || owed?._headerSent || owed?.req?.complete) {
    socket.destroy();
    return;
  }
  const [status, reason, message] =
    error.code === "HPE_HEADER_OVERFLOW"
      ? [431, "Request Header Fields Too Large", "the request's headers are larger than 16 KB"]
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? [408, "Request Timeout", "the request did not arrive in time"]
        : [400, "Bad Request", "the request is not valid HTTP/1.1"];
  socket.end(rawRefusal(status, reason, "ERR_BAD_REQUEST", message));
}

/** A whole HTTP/1.1 response in the refusal form, for a socket no response object serves; the connection closes. */
function rawRefusal(status: number, reason: string, code: string, message: string): string {
  const body = JSON.stringify({ error: { code, message } });
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

/** The routes, as a refusal names them. */
export const ROUTES = "GET /health, POST /run, POST /host";

/**
 * An `expect` header other than `100-continue`: Node answers it with a bare 417 of its own unless
 * told otherwise. The refusal form instead, with that status.
 */
export function answerExpectation(_incoming: IncomingMessage, outgoing: ServerResponse): void {
  const body = JSON.stringify({
    error: { code: "ERR_BAD_REQUEST", message: "the only expectation this service meets is expect: 100-continue" },
  });
  outgoing.writeHead(417, { "content-type": "application/json", "content-length": Buffer.byteLength(body), connection: "close" });
  outgoing.end(body);
}

/**
 * A CONNECT request (a tunnel): Node ends the connection without a word unless told otherwise.
 * The refusal form instead, as for any method and path with no route.
 */
export function answerConnect(incoming: IncomingMessage, socket: Duplex): void {
  const target = String(incoming.url ?? "").slice(0, 200);
  socket.on("error", () => {});
  socket.end(rawRefusal(404, "Not Found", "ERR_NOT_FOUND", `no route for CONNECT ${target}; routes: ${ROUTES}`));
}
