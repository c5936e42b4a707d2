import { once } from "node:events";
import http from "node:http";
import net from "node:net";
import tls from "node:tls";
import { gzipSync } from "node:zlib";
import { EgressError } from "../../src/egress/index.js";

export interface SeenRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  localAddress: string;
  remoteAddress: string;
}

export interface Listener {
  host: string;
  port: number;
  /** TCP connections accepted, ever. */
  connections: number;
  requests: SeenRequest[];
  /** Responses the client went away from before they ended. */
  aborted: number;
  close(): Promise<void>;
}

/**
 * A real HTTP listener on a loopback address (port 0). Paths: `/echo` answers the request as JSON,
 * `/redirect?to=URL&status=302`, `/big` streams until the client leaves, `/gzip` is a small
 * gzipped body that inflates to 1 MiB, `/hang` never answers, `/stall` answers headers and a
 * first chunk, then nothing.
 */
export async function listen(host: "127.0.0.1" | "::1"): Promise<Listener> {
  const sockets = new Set<net.Socket>();
  const state: Listener = {
    host,
    port: 0,
    connections: 0,
    requests: [],
    aborted: 0,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    state.requests.push({
      method: req.method ?? "",
      url: req.url ?? "",
      headers: req.headers,
      body: Buffer.concat(chunks).toString(),
      localAddress: req.socket.localAddress ?? "",
      remoteAddress: req.socket.remoteAddress ?? "",
    });
    const url = new URL(req.url ?? "/", "http://x");
    res.on("close", () => {
      if (!res.writableFinished) state.aborted++;
    });
    switch (url.pathname) {
      case "/redirect":
        res.writeHead(Number(url.searchParams.get("status") ?? 302), { location: url.searchParams.get("to") ?? "/" });
        res.end("moved");
        return;
      case "/big": {
        res.writeHead(200, { "content-type": "application/octet-stream" });
        const chunk = Buffer.alloc(64 * 1024, 97);
        const pump = () => {
          while (!res.destroyed && res.write(chunk)) {
            /* until backpressure */
          }
        };
        res.on("drain", pump);
        pump();
        return;
      }
      case "/gzip":
        res.writeHead(200, { "content-encoding": "gzip", "content-type": "text/plain" });
        res.end(gzipSync(Buffer.alloc(1024 * 1024, 48)));
        return;
      case "/hang":
        return;
      case "/stall":
        res.writeHead(200, { "content-type": "text/plain" });
        res.write("first chunk");
        return;
      default:
        res.writeHead(200, { "content-type": "application/json", "set-cookie": ["a=1", "b=2"] });
        res.end(JSON.stringify(state.requests.at(-1)));
    }
  });
  server.on("connection", (socket) => {
    state.connections++;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  server.listen(0, host);
  await once(server, "listening");
  state.port = (server.address() as net.AddressInfo).port;
  return state;
}

export interface ConnectAttempt {
  host: string;
  port: number;
  /** The addresses the socket would have connected to (a literal host, or what its lookup answered). */
  addresses: string[];
  blocked: boolean;
}

type Lookup = (host: string, options: object, callback: (...args: unknown[]) => void) => void;

/**
 * A tripwire under every socket undici opens (net.connect and tls.connect): records where each
 * connection would go and lets it through only to a loopback address, so a bug in the module under
 * test can never reach another network address, and tests can assert "no connection was attempted".
 */
export function guardConnections(): { attempts: ConnectAttempt[]; restore(): void } {
  const attempts: ConnectAttempt[] = [];
  const allowed = (address: string) => address === "127.0.0.1" || address === "::1";
  const failing: Lookup = (_host, _options, callback) => {
    const error: NodeJS.ErrnoException = new Error("blocked by the test's connection guard");
    error.code = "EBLOCKED";
    process.nextTick(callback, error);
  };
  const wrap = <F extends (...args: never[]) => unknown>(original: F): F =>
    function (this: unknown, ...args: unknown[]) {
      const options = args[0];
      if (options === null || typeof options !== "object") return original.apply(this, args as never);
      const opts = options as { host?: string; port?: number; lookup?: Lookup };
      const host = opts.host ?? "localhost";
      const attempt: ConnectAttempt = { host, port: Number(opts.port), addresses: [], blocked: false };
      attempts.push(attempt);
      if (net.isIP(host)) {
        attempt.addresses.push(host);
        if (allowed(host)) return original.apply(this, args as never);
        attempt.blocked = true;
        return original.call(this, { ...opts, host: "blocked.invalid", lookup: failing } as never);
      }
      const lookup = opts.lookup;
      if (lookup === undefined) {
        attempt.blocked = true;
        return original.call(this, { ...opts, lookup: failing } as never);
      }
      const guarded: Lookup = (name, lookupOptions, callback) =>
        lookup(name, lookupOptions, (error, address, family) => {
          if (error) return callback(error);
          const list = Array.isArray(address) ? address.map((entry: { address: string }) => entry.address) : [address as string];
          attempt.addresses.push(...list);
          if (!list.every(allowed)) {
            attempt.blocked = true;
            return failing(name, lookupOptions, callback);
          }
          callback(null, address, family);
        });
      return original.call(this, { ...opts, lookup: guarded } as never);
    } as unknown as F;
  const originalNet = net.connect;
  const originalTls = tls.connect;
  net.connect = wrap(originalNet);
  tls.connect = wrap(originalTls);
  return {
    attempts,
    restore() {
      net.connect = originalNet;
      tls.connect = originalTls;
    },
  };
}

/** What the listener saw, as its `/echo` path reports it. */
export async function echoOf(response: Response): Promise<SeenRequest> {
  return (await response.json()) as SeenRequest;
}

/** A resolver from a fixed table, counting its calls. Unknown names fail like NXDOMAIN. */
export function tableResolver(table: Record<string, string[] | ((call: number) => string[])>) {
  const calls: string[] = [];
  const resolve = async (host: string) => {
    calls.push(host);
    const entry = table[host];
    if (entry === undefined) throw Object.assign(new Error(`no such name ${host}`), { code: "ENOTFOUND" });
    return typeof entry === "function" ? entry(calls.filter((name) => name === host).length) : entry;
  };
  return { resolve, calls };
}

/** Await a refusal: an EgressError with the design's code, and how long it took. */
export async function refusal(promise: Promise<unknown>): Promise<{ error: EgressError; ms: number }> {
  const started = performance.now();
  try {
    await promise;
  } catch (error) {
    if (!(error instanceof EgressError)) throw new Error(`expected an EgressError, got ${String(error)}`, { cause: error });
    return { error, ms: performance.now() - started };
  }
  throw new Error("expected a refusal, the request went through");
}
