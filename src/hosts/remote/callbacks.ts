import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { Bindings, type BindingsLike } from "../../core/bindings.js";
import type { RemoteCallback } from "../../core/protocol.js";
import { requestTimeouts } from "../../core/http-timeouts.js";
import { createRpcHandler, MAX_CALL_BODY_MB, type RpcEnv, type RpcHandler } from "./rpc.js";

export interface CallbackOptions {
  /** The URL the executor calls back at. With `rpc`: where you mounted its `handle`. */
  url?: string;
  /** Your own `createRpcHandler(...)`, mounted in your app at `url`: cordon then starts no server. */
  rpc?: RpcHandler;
  /** Where cordon's callback server listens. Default 127.0.0.1 (reachable by an executor on this machine). */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
}

export interface Registration {
  callback: RemoteCallback;
  /** A fresh grant for the next request of a prefix (each expires soon after it); `done` when it ends. */
  renew(ttlMs: number): RemoteCallback;
  /** The request the last `renew` was for has ended. */
  done(): void;
  unregister(): void;
}

/**
 * The host's end of bindings over the wire: it registers a run's host functions (globals, host
 * imports, brokered fetch) with an RPC handler and hands the executor a grant for exactly those
 * names. By default cordon serves the handler itself, on 127.0.0.1 and a free port, started on
 * the first run that has a function to call back; the signing key is random per sandbox and
 * never leaves this process.
 */
export class Callbacks {
  private readonly rpc: RpcHandler;
  private server: Promise<{ server: Server; url: string }> | undefined;

  constructor(private readonly options: CallbackOptions = {}) {
    if (options.rpc && !options.url) throw new TypeError("cordon: remote.callback.url is required with remote.callback.rpc");
    this.rpc = options.rpc ?? createRpcHandler({ key: randomBytes(32) });
  }

  /** Register `bindings` for one run or prefix; undefined when there is nothing to call back. */
  async register(bindings: BindingsLike, subject: string, ttlMs: number, scoped = false): Promise<Registration | undefined> {
    if (!(bindings instanceof Bindings) || bindings.size === 0) return undefined;
    const url = this.options.rpc ? (this.options.url as string) : (await this.start()).url;
    // The name a function is called back by: its label, made unique. Labels can repeat
    // (`{ "b.c": f1, b: { c: f2 } }` are both `globals.a.b.c`), and a repeated one would call
    // the last function of that label for every one of them.
    const names = new Map<string, number>();
    const list = bindings.functions.map((f, fnId) => {
      let name = f.label;
      for (let n = 1; names.has(name); n++) name = `${f.label}#${n}`;
      names.set(name, fnId);
      return name;
    });
    const { run, grant, unregister } = this.rpc.register(bindings, names, { subject, ttlMs, scoped });
    return {
      callback: { url, run, grant, names: list },
      renew: (ttl) => ({ url, run, grant: this.rpc.renew(run, ttl) ?? grant, names: list }),
      done: () => this.rpc.close(run),
      unregister,
    };
  }

  async close(): Promise<void> {
    const started = this.server;
    this.server = undefined;
    if (!started) return;
    const { server } = await started.catch(() => ({ server: undefined }));
    if (!server) return;
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }

  private start(): Promise<{ server: Server; url: string }> {
    this.server ??= (async () => {
      const { createAdaptorServer } = await import("@hono/node-server");
      // overrideGlobalObjects: false keeps the global Request/Response that the fetch wire recognises.
      // The executor's bounds on how long a request may take to arrive (a trickled head: 10 s,
      // was Node's 60 s checked every 30 s), for calls of up to MAX_CALL_BODY_MB.
      const server = createAdaptorServer({
        fetch: (request: Request, env: RpcEnv) => this.rpc.handle(request, env),
        overrideGlobalObjects: false,
        serverOptions: requestTimeouts(MAX_CALL_BODY_MB),
      }) as Server;
      const host = this.options.host ?? "127.0.0.1";
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(this.options.port ?? 0, host, () => resolve());
      });
      // Idle keep-alive sockets must not hold the process open.
      server.unref();
      const port = (server.address() as AddressInfo).port;
      const url = this.options.url ?? `http://${host.includes(":") ? `[${host}]` : host}:${port}/`;
      return { server, url };
    })();
    this.server.catch(() => {
      this.server = undefined;
    });
    return this.server;
  }
}
