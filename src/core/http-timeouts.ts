// How long a client of cordon's own HTTP servers (the executor, the remote host's callback server)
// may take over a request.

/**
 * How long a client may take to send a request's head (its headers), from the moment it connects
 * or its previous response ended. Node's default is 60 s, checked every 30 s: a socket that
 * trickled a header line now and then held its connection for up to 90 s, and a few hundred such
 * sockets (no secret needed) held every connection the service allows. A real client sends its
 * head in one write.
 */
export const HEADERS_TIMEOUT_MS = 10_000;
/** How often Node looks for requests past their timeouts: the timeouts fire at most this late. */
export const CONNECTIONS_CHECK_MS = 1_000;
/**
 * The whole request, body included, must arrive within this plus a second per MiB of the body cap
 * (92 s for the default 32 MiB): a client uploading at 1 MiB/s or more is never cut. Only an
 * admitted request's body is read at all. It bounds the request, not the run: an answer may take
 * as long as the run's own limits.
 */
const REQUEST_TIMEOUT_BASE_MS = 60_000;

/** The options for `http.createServer` that bound how long a request may take to arrive. */
export function requestTimeouts(maxBodyMb: number): {
  headersTimeout: number;
  requestTimeout: number;
  connectionsCheckingInterval: number;
} {
  return {
    headersTimeout: HEADERS_TIMEOUT_MS,
    requestTimeout: REQUEST_TIMEOUT_BASE_MS + Math.ceil(maxBodyMb) * 1000,
    connectionsCheckingInterval: CONNECTIONS_CHECK_MS,
  };
}
