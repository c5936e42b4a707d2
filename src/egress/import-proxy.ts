import { randomBytes } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { concealName, EgressError } from "./errors.js";
import { addressLiteral, createSystemResolve, type Resolve, type ResolvedAddress, resolveHost } from "./resolve.js";
import { effectivePort, ruleHostOf } from "./rules.js";
import { isExempt, originOf, parseInternalOrigins } from "./target.js";

/**
 * A forward proxy on 127.0.0.1 through which the deno engine's processes fetch remote modules
 * (Deno reads HTTPS_PROXY and HTTP_PROXY for them), so that Deno resolves no name itself. Each
 * process gets a grant of its own (credentials in the proxy URL) naming the hosts its
 * `--allow-import` names. Every tunnel (CONNECT, for https) and every plain-http request is
 * checked again here: its host and port against the grant, every A/AAAA record of the name
 * against the special-purpose ranges (an `internalOrigins` origin exempt, as for fetch). Then it
 * connects to the checked address only: a name whose DNS points at a private address, or is
 * rebound to one after a first check, reaches nothing. TLS stays end to end: Deno sends the name
 * as SNI and verifies the certificate against it.
 */
export interface ImportProxyOptions {
  /** Exact origins exempt from the special-address check, as for fetch (`policy.net.internalOrigins`). */
  internalOrigins?: readonly string[];
  /** Resolve a name to all its addresses. Default: c-ares, A and AAAA. */
  resolve?: Resolve;
  /** Default 5 s. */
  dnsTimeoutMs?: number;
  /** Default 10 s per address tried. */
  connectTimeoutMs?: number;
  /** A tunnel or request with no traffic this long is closed. Default 60 s. */
  idleTimeoutMs?: number;
  /** Tunnels and requests one grant may have open at once; more are refused (503). Default 32. */
  maxOpenPerGrant?: number;
}

export interface ImportGrant {
  /** HTTPS_PROXY and HTTP_PROXY pointing at the proxy with this grant's credentials. */
  readonly env: Record<string, string>;
  /** The proxy's last refusals of this grant's requests (the latest last), for the run's error message. */
  readonly refusals: readonly { host: string; reason: string }[];
  /** Forget the refusals so far (a new run begins in the process). */
  clearRefusals(): void;
  /** Refuse its credentials from now on and close what it has open. */
  revoke(): void;
}

/** The user name in a grant's proxy URL; the password is the grant's token. */
const USER = "cordon";
/** Connections the proxy holds at once, tunnels included (every grant's in-flight cap is far below). */
const MAX_CONNECTIONS = 1024;
/** A client's request head must arrive within this (slow headers held a socket forever). */
const HEADERS_TIMEOUT_MS = 10_000;
/** A refused tunnel's socket is ended, and destroyed this long after if its client keeps it open. */
const LINGER_MS = 1000;
const KEPT_REFUSALS = 4;
/** Request headers that concern the hop to the proxy, not the origin. */
const HOP_HEADERS = new Set([
  "proxy-authorization",
  "proxy-connection",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

interface Allowed {
  host: string;
  /** undefined: any port (a port-less `--allow-import` entry, as Deno reads it). */
  port: number | undefined;
}

class Grant implements ImportGrant {
  readonly refusals: { host: string; reason: string }[] = [];
  /** Its sockets, both sides of each tunnel: revoking the grant closes them. */
  readonly open = new Set<net.Socket>();
  /** Tunnels and requests in progress. */
  inFlight = 0;
  revoked = false;

  constructor(
    readonly env: Record<string, string>,
    readonly allowed: readonly Allowed[],
    private readonly onRevoke: () => void,
  ) {}

  /** Count a tunnel or request in flight on `socket` until `done` closes; revoking the grant closes the socket. */
  hold(socket: net.Socket, done: { once(event: "close", listener: () => void): unknown }): void {
    this.inFlight++;
    this.open.add(socket);
    done.once("close", () => {
      this.inFlight--;
      this.open.delete(socket);
    });
  }

  allows(host: string, port: number): boolean {
    return this.allowed.some((a) => a.host === host && (a.port === undefined || a.port === port));
  }

  clearRefusals(): void {
    this.refusals.length = 0;
  }

  refused(host: string, reason: string): void {
    this.refusals.push({ host, reason });
    if (this.refusals.length > KEPT_REFUSALS) this.refusals.shift();
  }

  revoke(): void {
    if (this.revoked) return;
    this.revoked = true;
    for (const socket of this.open) socket.destroy();
    this.open.clear();
    this.onRevoke();
  }
}

/** A request the proxy turns away: the status it answers with, and why (for the grant's refusals). */
class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The host asked for, when known. */
    readonly host = "",
  ) {
    super(message);
  }
}

export class ImportProxy {
  private readonly grants = new Map<string, Grant>();
  private readonly sockets = new Set<net.Socket>();
  private readonly internal: ReadonlySet<string>;
  private readonly resolve: Resolve;
  private readonly dnsTimeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly idleTimeoutMs: number;
  private readonly maxOpen: number;
  private closed = false;

  private constructor(
    private readonly server: http.Server,
    readonly port: number,
    options: ImportProxyOptions,
    internal: ReadonlySet<string>,
  ) {
    this.internal = internal;
    this.dnsTimeoutMs = options.dnsTimeoutMs ?? 5000;
    this.resolve = options.resolve ?? createSystemResolve({ timeoutMs: this.dnsTimeoutMs });
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    this.idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
    this.maxOpen = options.maxOpenPerGrant ?? 32;
    server.on("connection", (socket: net.Socket) => {
      this.sockets.add(socket);
      // Once per socket: a keep-alive socket serves many requests (a listener per request grew without bound).
      socket.on("error", () => {});
      socket.once("close", () => this.sockets.delete(socket));
    });
    server.on("connect", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => void this.tunnel(req, socket, head));
    server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => void this.forward(req, res));
  }

  /** Listen on 127.0.0.1 (an ephemeral port). Misconfigured internalOrigins throw a TypeError. */
  static async start(options: ImportProxyOptions = {}): Promise<ImportProxy> {
    const internal = parseInternalOrigins(options.internalOrigins);
    const server = http.createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: 30_000 });
    server.maxConnections = MAX_CONNECTIONS;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    // The proxy never keeps its host process alive: the Deno processes it serves do not either.
    server.unref();
    return new ImportProxy(server, (server.address() as net.AddressInfo).port, options, internal);
  }

  /**
   * A grant for one Deno process: `hosts` as its `--allow-import` names them (`"esm.sh"`: any
   * port, `"example.com:8443"`), already checked and normalized (importAllowList).
   */
  grant(hosts: readonly string[]): ImportGrant {
    const token = randomBytes(24).toString("hex");
    const url = `http://${USER}:${token}@127.0.0.1:${this.port}`;
    const allowed = hosts.map((entry): Allowed => {
      const colon = entry.lastIndexOf(":");
      return colon === -1
        ? { host: entry, port: undefined }
        : { host: entry.slice(0, colon), port: Number(entry.slice(colon + 1)) };
    });
    const grant = new Grant({ HTTPS_PROXY: url, HTTP_PROXY: url }, allowed, () => this.grants.delete(token));
    if (this.closed) grant.revoke();
    else this.grants.set(token, grant);
    return grant;
  }

  /** Client connections open now (each tunnel's client side counts once). */
  get connections(): number {
    return this.sockets.size;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const grant of [...this.grants.values()]) grant.revoke();
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** CONNECT host:port (https): a tunnel to the checked address, bytes copied both ways. */
  private async tunnel(req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
    const grant = this.grantOf(req);
    if (!grant) return endSoon(socket, statusLine(407, "cordon's import proxy needs this process's credentials"));
    if (grant.inFlight >= this.maxOpen)
      return void this.refuseTunnel(grant, socket, new Refusal(503, "too many imports in flight"));
    grant.hold(socket, socket);
    try {
      const upstream = await this.reach(grant, authorityUrl(req.url ?? ""), socket);
      if (!upstream) return void socket.destroy();
      grant.open.add(upstream);
      upstream.once("close", () => grant.open.delete(upstream));
      socket.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      this.splice(socket, upstream);
    } catch (error) {
      this.refuseTunnel(grant, socket, error);
    }
  }

  /** An absolute-form request (plain http): forwarded to the checked address, the answer streamed back. */
  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const grant = this.grantOf(req);
    if (!grant) return void res.writeHead(407, { connection: "close" }).end();
    if (grant.inFlight >= this.maxOpen) return this.refuseRequest(grant, res, new Refusal(503, "too many imports in flight"));
    grant.hold(req.socket, res);
    try {
      if (req.method !== "GET" && req.method !== "HEAD") throw new Refusal(405, `${req.method} is not a module fetch`);
      const url = requestUrl(req.url ?? "");
      const upstream = await this.reach(grant, url, res);
      if (!upstream) return void res.destroy();
      const headers = endToEnd(req.headers);
      headers.host = url.host;
      const outgoing = http.request({
        method: req.method,
        path: `${url.pathname}${url.search}`,
        headers,
        createConnection: () => upstream,
        timeout: this.idleTimeoutMs,
      });
      outgoing.on("timeout", () => outgoing.destroy());
      outgoing.on("error", () => {
        if (!res.headersSent) this.refuseRequest(grant, res, new Refusal(502, `${originOf(url)} failed to answer`));
        else res.destroy();
      });
      outgoing.on("response", (answer) => {
        // Nothing in this listener may throw: an exception here would end the host process.
        const status = answer.statusCode ?? 0;
        // Node's client takes any three digits; writeHead throws below 100 (an upstream answering
        // "000" ended the host). 1xx are never a final answer.
        if (!Number.isInteger(status) || status < 200 || status > 999) {
          answer.destroy();
          this.refuseRequest(grant, res, new Refusal(502, `${originOf(url)} answered with status ${status}`, ruleHostOf(url)));
          return;
        }
        try {
          res.writeHead(status, endToEnd(answer.headers));
        } catch {
          answer.destroy();
          this.refuseRequest(
            grant,
            res,
            new Refusal(502, `${originOf(url)} answered with headers that cannot be passed on`, ruleHostOf(url)),
          );
          return;
        }
        answer.on("error", () => res.destroy());
        answer.pipe(res);
      });
      res.once("close", () => outgoing.destroy());
      outgoing.end();
    } catch (error) {
      this.refuseRequest(grant, res, error);
    }
  }

  /** The grant whose credentials the request carries (Basic, user "cordon", password the token). */
  private grantOf(req: http.IncomingMessage): Grant | undefined {
    const header = req.headers["proxy-authorization"];
    if (typeof header !== "string" || !header.startsWith("Basic ")) return undefined;
    const decoded = Buffer.from(header.slice(6), "base64").toString("utf8");
    if (!decoded.startsWith(`${USER}:`)) return undefined;
    const grant = this.grants.get(decoded.slice(USER.length + 1));
    return grant && !grant.revoked ? grant : undefined;
  }

  /** The grant names the host and port; every address the name has is public, or the origin is exempt. */
  private async check(grant: Grant, url: URL, signal: AbortSignal): Promise<ResolvedAddress[]> {
    const host = ruleHostOf(url);
    const port = effectivePort(url);
    if (port < 1) throw new Refusal(400, `port ${port} is not a port to fetch from`, host);
    if (!grant.allows(host, port)) throw new Refusal(403, `${host}:${port} is not in capabilities.import`, host);
    // As fetch's refusals (concealName): the tenant reads these (the import's error), and told
    // apart they would map the host's internal DNS for it.
    const exempt = isExempt(this.internal, url);
    const forGuest = exempt || addressLiteral(url.hostname) !== null ? undefined : concealName(url.hostname, originOf(url));
    let addresses: ResolvedAddress[];
    try {
      addresses = await resolveHost(url.hostname, this.resolve, this.dnsTimeoutMs, forGuest, signal);
    } catch (error) {
      if (forGuest && error instanceof EgressError && error.forGuest) throw new Refusal(403, forGuest.message, host);
      throw new Refusal(502, error instanceof EgressError ? error.message : `resolving "${host}" failed`, host);
    }
    for (const { address, verdict } of addresses) {
      if (verdict !== "public" && !exempt) {
        if (forGuest) throw new Refusal(403, forGuest.message, host);
        throw new Refusal(403, `${address} is ${verdict}, not a public address`, host);
      }
    }
    return addresses;
  }

  /**
   * Check `url` for the grant and connect to a checked address. Undefined when the grant was
   * revoked (its process ended) or the client went away meanwhile: connected nowhere, or the
   * connection made closed again. A client that goes away (revoking a grant closes its clients)
   * also ends the name's lookup, its queries cancelled.
   */
  private async reach(grant: Grant, url: URL, client: net.Socket | http.ServerResponse): Promise<net.Socket | undefined> {
    const gone = () => client.destroyed;
    const lookup = new AbortController();
    const cancel = () => lookup.abort(new Error("the import's client went away"));
    client.once("close", cancel);
    let addresses: ResolvedAddress[];
    try {
      addresses = await this.check(grant, url, lookup.signal);
    } catch (error) {
      // Nobody to refuse: a lookup ended by the client's leaving is no refusal of the grant's.
      if (gone() || grant.revoked) return undefined;
      throw error;
    } finally {
      client.off("close", cancel);
    }
    if (gone() || grant.revoked) return undefined;
    const upstream = await this.connect(ruleHostOf(url), addresses, effectivePort(url));
    if (!gone() && !grant.revoked) return upstream;
    upstream.destroy();
    return undefined;
  }

  /** A connection to the first checked address that answers; no other address is ever tried. */
  private async connect(host: string, addresses: readonly ResolvedAddress[], port: number): Promise<net.Socket> {
    let last: unknown;
    for (const { address, family } of addresses) {
      try {
        return await new Promise<net.Socket>((resolve, reject) => {
          const socket = net.connect({ host: address, port, family });
          const fail = (error: Error) => {
            socket.destroy();
            reject(error);
          };
          socket.setTimeout(this.connectTimeoutMs, () => fail(Object.assign(new Error("timed out"), { code: "ETIMEDOUT" })));
          socket.once("error", fail);
          socket.once("connect", () => {
            socket.removeListener("error", fail);
            socket.on("error", () => {});
            socket.setTimeout(0);
            resolve(socket);
          });
        });
      } catch (error) {
        last = error;
      }
    }
    // The error's code only: its message names the address and port ("connect ECONNREFUSED 10.0.0.7:443").
    const code = (last as NodeJS.ErrnoException | undefined)?.code ?? "failed";
    throw new Refusal(502, `no address of ${host} accepted a connection (${code})`, host);
  }

  /** Copy bytes both ways until either side ends, errs or stays idle too long. */
  private splice(a: net.Socket, b: net.Socket): void {
    const end = () => {
      a.destroy();
      b.destroy();
    };
    for (const socket of [a, b]) {
      socket.setTimeout(this.idleTimeoutMs, end);
      socket.once("close", end);
      socket.once("error", end);
    }
    a.pipe(b);
    b.pipe(a);
  }

  private refuseTunnel(grant: Grant, socket: net.Socket, error: unknown): void {
    const refusal = asRefusal(error);
    grant.refused(refusal.host, refusal.message);
    endSoon(socket, statusLine(refusal.status, refusal.message));
  }

  private refuseRequest(grant: Grant, res: http.ServerResponse, error: unknown): void {
    const refusal = asRefusal(error);
    grant.refused(refusal.host, refusal.message);
    if (res.headersSent) return void res.destroy();
    res.writeHead(refusal.status, { "content-type": "text/plain; charset=utf-8", connection: "close" });
    res.end(`cordon: ${refusal.message}\n`);
  }
}

/**
 * Answer and end a socket the HTTP server no longer manages (a CONNECT's), and destroy it soon
 * after: a client that never closed its end kept the socket, and a descriptor of the host's, open.
 */
function endSoon(socket: net.Socket, answer: string): void {
  socket.end(answer);
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}

/** Headers without the hop-by-hop ones (a forwarded request's `host` is then set from its URL). */
function endToEnd(headers: http.IncomingHttpHeaders): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_HEADERS.has(name)) kept[name] = value;
  }
  return kept;
}

function asRefusal(error: unknown): Refusal {
  return error instanceof Refusal ? error : new Refusal(502, `the import failed: ${(error as Error)?.message ?? String(error)}`);
}

/** A status line and an empty answer; the reason travels in a header, never as a body a tunnel could mistake for TLS. */
function statusLine(status: number, reason: string): string {
  const text = http.STATUS_CODES[status] ?? "Refused";
  // A header value holds no line breaks (the reason quotes names a guest chose).
  const header = reason.replace(/[^\x20-\x7e]/g, "?");
  return `HTTP/1.1 ${status} ${text}\r\nx-cordon-refusal: ${header}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`;
}

/** A CONNECT target (`host:port`, `[v6]:port`) as an https URL; anything else is refused. */
function authorityUrl(authority: string): URL {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point.
  if (!/^[^\u0000-\u0020\u007f/?#@\\]+:\d{1,5}$/.test(authority)) throw new Refusal(400, "the tunnel's target is not host:port");
  let url: URL;
  try {
    url = new URL(`https://${authority}/`);
  } catch {
    throw new Refusal(400, "the tunnel's target is not host:port");
  }
  return url;
}

/** An absolute-form request target: http only (https arrives as CONNECT), no credentials. */
function requestUrl(target: string): URL {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    throw new Refusal(400, "the request's target is not an absolute URL");
  }
  if (url.protocol !== "http:") throw new Refusal(400, `${url.protocol} requests are not proxied (https goes through CONNECT)`);
  if (url.username || url.password) throw new Refusal(400, "a URL with credentials is not fetched");
  return url;
}
