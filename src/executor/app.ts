import type { HttpBindings } from "@hono/node-server";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import { type Context, Hono } from "hono";
import type { Logger } from "pino";
import { CordonError } from "../core/errors.js";
import { CLIENT_HEADER, CLIENT_ID, LOAD_HEADER, PREFIX_GONE, PREFIX_HEADER } from "../core/protocol.js";
import type { RunResult } from "../core/types.js";
import type { Sandbox } from "../sandbox.js";
import type { Admission } from "./admission.js";
import { type BodyBudget, readCappedBody } from "./body.js";
import { ServiceError } from "./errors.js";
import { parseRemoteRequest } from "./host-schema.js";
import { answerHostRequest, type HostRouteDeps } from "./host-route.js";
import type { InFlight } from "./inflight.js";
import { logRefusal, logRun } from "./log.js";
import { encodeResult } from "./result-text.js";
import { lingerAfterRefusal } from "./linger.js";
import { destroyWhenStalled, RESPONSE_STALL_MS } from "./stalled-response.js";
import { parseRunRequest } from "./schema.js";
import { ROUTES } from "./refusals.js";
import type { WarmRunner } from "./warm.js";

export interface AppDeps {
  admit: (header: string | undefined) => Admission;
  sandbox: Sandbox;
  runner: WarmRunner;
  inflight: InFlight;
  logger: Logger;
  maxBodyBytes: number;
  /** The request body bytes held at once, across all requests. */
  bodyBudget: BodyBudget;
  version: string;
  /** Where guests run: "process" (the service's default) or "inprocess". */
  hostName: string;
  draining: () => boolean;
  /** Runs waiting for a slot: every sandbox's queue (one per engine in use) and `/host`'s. */
  queueDepth: () => number;
  /** Module preparations still evaluating whose requests all left: each holds a slot until it ends. */
  unclaimedPreparations: () => number;
  /** The remote host's requests (`POST /host`). */
  host: HostRouteDeps;
  /** Why a callback URL is refused (undefined: allowed), given the requester's address. */
  checkCallback: (url: string, requester: string | undefined) => string | undefined;
}

type Env = { Bindings: HttpBindings };

/**
 * The routes: `GET /health` (open), `POST /run` and `POST /host` (the remote host's protocol,
 * src/core/protocol.ts), both admitted by the bearer secret. Anything
 * else is a 404. Refusals are `{ error: { code, message } }` with a 4xx/5xx status; a run always
 * answers 200 with its RunResult, whether the guest completed, failed or was aborted.
 *
 * The body of a 200 is the RunResult as cordon's codec text (src/core/codec.ts), which is JSON:
 * plain JSON values are themselves, and any other value is an object tagged by its "$" key —
 * `{"$":"u"}` undefined, `{"$":"n","v":"NaN"}` NaN, ±Infinity and -0, `{"$":"b","v":"12"}` a
 * BigInt, `{"$":"d","v":<epoch ms>}` a Date, `{"$":"m","v":[[k,v],…]}` a Map, `{"$":"s","v":[…]}`
 * a Set, `{"$":"t","t":"Uint8Array","v":<base64>}` a typed array, `{"$":"a","v":<base64>}` an
 * ArrayBuffer, `{"$":"e","n":name,"m":message,…}` an Error, `{"$":"R",…}`/`{"$":"Q",…}`/`{"$":"H",…}`
 * a Response/Request/Headers, and `{"$":"o","v":{…}}` a plain object that has its own "$" key.
 * A JSON client reads plain results as they are; a JS client decodes everything with the codec.
 */
export function createApp(deps: AppDeps): Hono<Env> {
  const app = new Hono<Env>();

  // A request whose body was not read (GET /health or a 404 with a body): its connection closes
  // after the answer. Node would otherwise read and discard the rest to keep the connection, for
  // as long as the client sends (up to the request timeout), for a client that holds no secret.
  app.use(async (c, next) => {
    await next();
    if (!c.env.incoming.complete) {
      lingerAfterRefusal(c.env.incoming);
      c.header("connection", "close");
    }
  });

  app.get("/health", (c) => {
    const body = {
      status: deps.draining() ? "draining" : "ok",
      engine: deps.sandbox.engineName,
      host: deps.hostName,
      version: deps.version,
      // activeRuns: requests being answered, a module's first preparation included (the sandbox
      // counts only calls and runs), and preparations their requests all left that still hold a
      // slot (they read 0 while every slot was busy); queueDepth: of those, runs waiting for a
      // slot, /host's included.
      load: { activeRuns: deps.inflight.size + deps.unclaimedPreparations(), queueDepth: deps.queueDepth() },
      // Remote hosts' prefixes against their caps, as aggregates: this route is open to anyone.
      prefixes: deps.host.prefixes.stats(),
    };
    // 503 while draining, so a load balancer stops sending work here.
    return c.json(body, deps.draining() ? 503 : 200);
  });

  app.post("/run", async (c) => {
    const { body, signal } = await admitted(c, deps);
    const request = parseRunRequest(body);
    const started = performance.now();
    let result: RunResult;
    try {
      result = await deps.runner.run(request, signal);
    } catch (error) {
      // The sandbox throws only for misconfiguration (a TypeError naming the option, "cordon: …")
      // or disposal. Any other TypeError is the executor's fault, not the client's.
      if (error instanceof TypeError && error.message.startsWith("cordon:"))
        throw new ServiceError("ERR_BAD_REQUEST", error.message);
      if (error instanceof CordonError && deps.draining())
        throw new ServiceError("ERR_SHUTTING_DOWN", "the executor is shutting down");
      throw error;
    }
    logRun(deps.logger, result, performance.now() - started);
    return sendAnswer(c, await encodeResult(result), resultHeaders(deps));
  });

  app.post("/host", async (c) => {
    const { body, signal } = await admitted(c, deps);
    const request = parseRemoteRequest(body);
    if (request.callback) {
      const refused = deps.checkCallback(request.callback.url, c.env.incoming.socket.remoteAddress);
      if (refused) throw new ServiceError("ERR_BAD_REQUEST", refused);
    }
    const started = performance.now();
    const client = c.req.header(CLIENT_HEADER);
    const answer = await answerHostRequest(deps.host, request, signal, {
      address: c.env.incoming.socket.remoteAddress,
      client: client && CLIENT_ID.test(client) ? client : "",
    });
    if ("gone" in answer) throw new ServiceError(PREFIX_GONE, "this executor no longer holds that prefix; prepare it again");
    if ("done" in answer) return c.body(null, 204);
    logRun(deps.logger, answer.result, performance.now() - started);
    const headers = resultHeaders(deps);
    if (answer.prefix) headers[PREFIX_HEADER] = answer.prefix;
    if (answer.load) headers[LOAD_HEADER] = answer.load;
    return sendAnswer(c, await encodeResult(answer.result), headers);
  });

  app.notFound((c) => {
    const error = new ServiceError("ERR_NOT_FOUND", `no route for ${c.req.method} ${c.req.path}; routes: ${ROUTES}`);
    logRefusal(deps.logger, error.status, error.code, c.req.method, c.req.path);
    return c.json(error.toJSON(), error.status);
  });

  app.onError((thrown, c) => {
    const error =
      thrown instanceof ServiceError ? thrown : new ServiceError("ERR_INTERNAL", "the executor failed to answer this request");
    if (!(thrown instanceof ServiceError)) deps.logger.error({ event: "internal", name: thrown.name, message: thrown.message });
    logRefusal(deps.logger, error.status, error.code, c.req.method, c.req.path);
    // A refused upload is not read further: the connection closes after this answer, lingering
    // so that the client reads the answer before the close (src/executor/linger.ts).
    if (!c.env.incoming.complete) lingerAfterRefusal(c.env.incoming);
    if (!c.env.incoming.complete || deps.draining()) c.header("connection", "close");
    if (error.status === 401) c.header("www-authenticate", 'Bearer realm="cordon"');
    return c.json(error.toJSON(), error.status);
  });

  return app;
}

/**
 * The steps every run route takes before its own: refuse while draining, admit by the bearer
 * secret before a byte of the body is read, read the body under the cap, and count the request
 * in flight until its response is out — a client that goes away aborts its run, and one that
 * stops reading its answer loses the connection (src/executor/stalled-response.ts).
 */
async function admitted(c: Context<Env>, deps: AppDeps): Promise<{ body: Buffer; signal: AbortSignal }> {
  const { incoming, outgoing } = c.env;
  if (deps.draining()) throw new ServiceError("ERR_SHUTTING_DOWN", "the executor is shutting down");
  const admission = deps.admit(c.req.header("authorization"));
  if (admission === "missing") throw new ServiceError("ERR_UNAUTHORIZED", "send authorization: Bearer <secret>");
  if (admission === "wrong") throw new ServiceError("ERR_UNAUTHORIZED", "the bearer secret is not this executor's");
  const body = await readCappedBody(incoming, deps.maxBodyBytes, deps.bodyBudget);
  const controller = new AbortController();
  const release = deps.inflight.add(controller);
  destroyWhenStalled(outgoing, () =>
    deps.logger.warn(
      { event: "response-stalled", path: c.req.path },
      `answer abandoned: the client read none of it for ${RESPONSE_STALL_MS} ms`,
    ),
  );
  outgoing.once("close", () => {
    if (!outgoing.writableFinished) controller.abort(new Error("the client closed the connection"));
    release();
    deps.bodyBudget.give(body.length);
  });
  return { body, signal: controller.signal };
}

/**
 * A 200 with the RunResult's text, written to the socket here. Through `c.body` each answer was
 * a Response of the global class (undici's: the adapter's own lighter one is off, see server.ts),
 * its text wrapped in a stream that the adapter then read back. Measured with bench/load.js's
 * load, builds alternated: 331 -> 559 runs/s (means of 4 rounds, on a busy 2-core machine).
 */
function sendAnswer(c: Context<Env>, text: string, headers: Record<string, string>): Response {
  headers["content-length"] = String(Buffer.byteLength(text));
  c.env.outgoing.writeHead(200, headers);
  c.env.outgoing.end(text);
  return RESPONSE_ALREADY_SENT;
}

function resultHeaders(deps: AppDeps): Record<string, string> {
  const headers: Record<string, string> = { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" };
  if (deps.draining()) headers.connection = "close";
  return headers;
}
