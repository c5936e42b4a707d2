import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { getRequestListener } from "@hono/node-server";
import type { Logger } from "pino";
import { pino } from "pino";
import { checkKnownKeys, checkObject } from "../core/options.js";
import type { SandboxOptions } from "../core/types.js";
import type { Engine } from "../core/engine.js";
import { MAX_TIME_MS } from "../core/limits.js";
import { Slots } from "../core/slots.js";
import { createSandbox } from "../create-sandbox.js";
import { engineOf, type Sandbox, unclaimedPreparations } from "../sandbox.js";
import { checkSecret, createAdmission, generateSecret } from "./admission.js";
import { createApp } from "./app.js";
import { BodyBudget } from "./body.js";
import { createCallbackCheck } from "./callback-targets.js";
import { limitConnections, requestTimeouts } from "./connections.js";
import { isLingering } from "./linger.js";
import { answerClientError, answerConnect, answerExpectation, answerRequestError } from "./refusals.js";
import { InFlight } from "./inflight.js";
import { DEFAULT_PREFIX_CAPS, RemotePrefixes } from "./remote-prefixes.js";
import { RunAborts } from "./run-aborts.js";
import { createServiceLogger } from "./log.js";
import { WarmRunner } from "./warm.js";

export interface ExecutorOptions {
  /** The admission secret, at least 32 bytes. Omitted: one is generated (`generatedSecret`). */
  secret?: string;
  /** Default 127.0.0.1: only this machine, until the operator says otherwise. */
  host?: string;
  /** Default 8787; 0 picks a free port (read it from `port`). */
  port?: number;
  /** The request body cap in MiB, refused while streaming. Default 32. */
  maxBodyMb?: number;
  /**
   * Request body bytes held at once across all requests, in MiB; an upload past it is refused
   * with ERR_CAPACITY (503). Default: 8 × maxBodyMb, at least 256.
   */
  maxBufferedBodyMb?: number;
  /** The sandbox's options. Default: the process host, engine auto, and SERVICE_POLICY. */
  sandbox?: SandboxOptions;
  /**
   * Open client connections at most; past it a new connection is closed at once (and logged). Each
   * holds a file descriptor: without a cap, idle or slow clients exhaust them. Default 4096.
   */
  maxConnections?: number;
  /**
   * Open connections from one client address (an IPv6 /64) at most: one peer cannot take every
   * connection. Default: half of `maxConnections` (rounded up).
   */
  maxConnectionsPerAddress?: number;
  /**
   * Remote hosts' prepared prefixes held at once. Past it the least recently used idle one ends
   * (its client prepares it again, cold); when all are in use a prepare fails with ERR_CAPACITY.
   * Default 4096.
   */
  maxPrefixes?: number;
  /**
   * Of those, prepared for one client address (an IPv6 /64) at most; past it that client's own idle
   * ones end first. A client cycling through more than this (the same client instance, by its
   * `cordon-client` header, preparing again within 60 s one that ended at this cap) is refused with
   * ERR_CAPACITY unless one of its own is unused for 60 s.
   * Default: half of `maxPrefixes`.
   */
  maxPrefixesPerAddress?: number;
  /** MiB of source (imports and bindings included) the held prefixes keep together, to prepare them again. Default 512. */
  maxPrefixMb?: number;
  /** Prepared modules kept warm (an LRU). Default 256. */
  warmModules?: number;
  /** How long `close()` lets in-flight runs finish before aborting them. Default 10 000 ms. */
  shutdownGraceMs?: number;
  /**
   * Origins (`https://app.internal:8443`) a remote host may name as its callback URL besides its
   * own address (and loopback, for a remote host on loopback). Default: none.
   */
  callbackOrigins?: string[];
  /** The service log (pino). Default: JSON lines on stderr; false: none. */
  logger?: Logger | false;
}

export interface Executor extends AsyncDisposable {
  /** `http://host:port`, ready to take `/run` and `/health`. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The secret this executor generated, when none was configured; undefined otherwise. */
  readonly generatedSecret: string | undefined;
  readonly sandbox: Sandbox;
  /** Stop accepting, let in-flight runs finish (or abort them after the grace), dispose the sandbox. */
  close(options?: { graceMs?: number }): Promise<void>;
}

/**
 * The service's ceilings unless the caller sets its own: a caller may ask for less, never more.
 * Without them one request could hold a run slot for as long as it liked.
 */
export const SERVICE_POLICY = { maxWallTimeMs: 60_000, maxCpuTimeMs: 60_000 } as const;

const OPTION_KEYS = [
  "secret",
  "host",
  "port",
  "maxBodyMb",
  "maxBufferedBodyMb",
  "maxConnections",
  "maxConnectionsPerAddress",
  "sandbox",
  "warmModules",
  "maxPrefixes",
  "maxPrefixesPerAddress",
  "maxPrefixMb",
  "shutdownGraceMs",
  "logger",
  "callbackOrigins",
];
/** Open connections at most, by default: far below the descriptors Node raises its limit to. */
const DEFAULT_MAX_CONNECTIONS = 4096;
/** After the grace period, aborted runs get this long to send their (aborted) results. */
const ABORT_SETTLE_MS = 2_000;

/** Start the executor service. Throws a TypeError naming the option for misconfiguration. */
export async function createExecutor(options: ExecutorOptions = {}): Promise<Executor> {
  checkObject(options as unknown, "executor options");
  checkKnownKeys(options as object, OPTION_KEYS, "executor options");
  const secret = options.secret === undefined ? generateSecret() : checkSecret(options.secret);
  const host = options.host ?? "127.0.0.1";
  if (typeof host !== "string" || host.length === 0) throw new TypeError("cordon: executor options.host must be a host name");
  const port = options.port ?? 8787;
  if (!Number.isInteger(port) || port < 0 || port > 65_535)
    throw new TypeError(`cordon: executor options.port must be an integer from 0 to 65535, got ${String(port)}`);
  const maxBodyMb = positive(options.maxBodyMb, "maxBodyMb", 32);
  const maxBufferedBodyMb = positive(options.maxBufferedBodyMb, "maxBufferedBodyMb", Math.max(8 * maxBodyMb, 256));
  const warmModules = positive(options.warmModules, "warmModules", 256);
  const maxPrefixes = whole(options.maxPrefixes, "maxPrefixes", DEFAULT_PREFIX_CAPS.max);
  const prefixCaps = {
    max: maxPrefixes,
    perAddress: whole(options.maxPrefixesPerAddress, "maxPrefixesPerAddress", Math.ceil(maxPrefixes / 2)),
    maxChars: Math.floor(
      positive(options.maxPrefixMb, "maxPrefixMb", DEFAULT_PREFIX_CAPS.maxChars / (1024 * 1024)) * 1024 * 1024,
    ),
  };
  const maxConnections = whole(options.maxConnections, "maxConnections", DEFAULT_MAX_CONNECTIONS);
  const perAddress = whole(options.maxConnectionsPerAddress, "maxConnectionsPerAddress", Math.ceil(maxConnections / 2));
  const defaultGraceMs = options.shutdownGraceMs === undefined ? 10_000 : graceMs(options.shutdownGraceMs, "shutdownGraceMs");
  const logger = options.logger === false ? pino({ enabled: false }) : (options.logger ?? createServiceLogger());

  if (options.sandbox?.host === "remote" || options.sandbox?.remote !== undefined)
    throw new TypeError('cordon: an executor runs guests itself: executor options.sandbox.host must be "process" or "inprocess"');
  const policy = { ...SERVICE_POLICY, ...options.sandbox?.policy };
  const sandbox = await createSandbox({ host: "process", ...options.sandbox, policy });
  const hostName = options.sandbox?.host === "inprocess" ? "inprocess" : "process";
  // Remote hosts name their engine; the other one is made on first use, on the same host.
  const others = new Map<string, Promise<Sandbox>>();
  const othersMade = new Set<Sandbox>();
  const engineFor = async (name: "v8" | "quickjs"): Promise<Engine> => {
    if (name === sandbox.engineName) return engineOf(sandbox);
    let other = others.get(name);
    if (!other) {
      other = createSandbox({ ...options.sandbox, host: hostName, engine: name, policy });
      others.set(name, other);
      other.then(
        (made) => othersMade.add(made),
        () => others.delete(name),
      );
    }
    return engineOf(await other);
  };
  const prefixes = new RemotePrefixes(undefined, prefixCaps);
  const slots = new Slots(
    options.sandbox?.maxConcurrentRuns ?? availableParallelism() * 4,
    options.sandbox?.maxQueuedRuns ?? 10_000,
  );
  const runner = new WarmRunner(sandbox, warmModules, { policy, host: hostName });
  const inflight = new InFlight();
  let draining = false;
  const admit = createAdmission(secret);
  const app = createApp({
    admit,
    sandbox,
    runner,
    inflight,
    logger,
    maxBodyBytes: Math.floor(maxBodyMb * 1024 * 1024),
    bodyBudget: new BodyBudget(Math.floor(maxBufferedBodyMb * 1024 * 1024)),
    version: packageVersion(),
    hostName,
    draining: () => draining,
    queueDepth: () => [sandbox, ...othersMade].reduce((sum, s) => sum + s.stats().queueDepth, slots.queueDepth),
    unclaimedPreparations: () => [sandbox, ...othersMade].reduce((sum, s) => sum + unclaimedPreparations(s), 0),
    host: { engine: engineFor, policy, prefixes, slots, aborts: new RunAborts() },
    checkCallback: createCallbackCheck(checkOrigins(options.callbackOrigins)),
  });
  // overrideGlobalObjects: false — the adapter would otherwise replace the global Request and
  // Response, which the sandbox's own fetch wire recognises by class. Not createAdaptorServer:
  // it passes no errorHandler, and the adapter's own refusals were bare 400s.
  const listener = getRequestListener(app.fetch, { overrideGlobalObjects: false, errorHandler: answerRequestError });
  // A request pipelined behind a refused upload is never served: its connection is closing.
  const handle = (incoming: IncomingMessage, outgoing: ServerResponse) =>
    isLingering(incoming.socket) ? incoming.socket.destroy() : listener(incoming, outgoing);
  const server = createServer(requestTimeouts(maxBodyMb), handle);
  // `expect: 100-continue`: Node would invite every such body before a route ran. Only an admitted
  // request is invited; any other gets its final answer (401, 404, 503) uninvited.
  server.on("checkContinue", (incoming: IncomingMessage, outgoing: ServerResponse) => {
    // Every authorization header, joined as the route reads them: Node's `headers` keeps only the
    // first, so a right secret followed by a wrong one was invited here and refused there.
    const authorization = incoming.headersDistinct.authorization?.join(", ");
    if (!draining && admit(authorization) === "admitted") outgoing.writeContinue();
    handle(incoming, outgoing);
  });
  server.on("checkExpectation", answerExpectation);
  server.on("connect", answerConnect);
  server.on("clientError", answerClientError);
  limitConnections(server, { maxConnections, perAddress }, logger);
  try {
    await listen(server, port, host);
  } catch (error) {
    prefixes.disposeAll();
    await sandbox.dispose();
    throw error;
  }
  const bound = (server.address() as AddressInfo).port;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${bound}`;
  logger.info(
    { event: "listening", address: `${host}:${bound}`, engine: sandbox.engineName, host: hostName, version: packageVersion() },
    "listening",
  );

  let closing: Promise<void> | undefined;
  const close = (closeOptions: { graceMs?: number } = {}): Promise<void> => {
    // Closing already, and now without grace: abort what is still running.
    if (closing && closeOptions.graceMs === 0) inflight.abortAll("the executor is shutting down");
    const grace = closeOptions.graceMs === undefined ? defaultGraceMs : graceMs(closeOptions.graceMs, "close() graceMs");
    closing ??= (async () => {
      draining = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      logger.info({ event: "draining", inFlight: inflight.size, graceMs: grace }, "draining");
      if (!(await inflight.idle(grace))) {
        logger.warn({ event: "aborting", inFlight: inflight.size }, "aborting runs past the grace period");
        inflight.abortAll("the executor is shutting down");
        await inflight.idle(ABORT_SETTLE_MS);
      }
      await runner.dispose();
      prefixes.disposeAll();
      await Promise.all(
        [...others.values()].map((other) =>
          other.then(
            (s) => s.dispose(),
            () => {},
          ),
        ),
      );
      await sandbox.dispose();
      server.closeAllConnections();
      await closed;
      logger.info({ event: "stopped" }, "stopped");
    })();
    return closing;
  };

  return {
    url,
    host,
    port: bound,
    generatedSecret: options.secret === undefined ? secret : undefined,
    sandbox,
    close,
    [Symbol.asyncDispose]: () => close(),
  };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

function checkOrigins(value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new TypeError("cordon: executor options.callbackOrigins must be an array of origins");
  for (const origin of value) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(String(origin));
    } catch {}
    if (
      !parsed ||
      (parsed.protocol !== "http:" && parsed.protocol !== "https:") ||
      parsed.origin !== String(origin).replace(/\/$/, "")
    ) {
      throw new TypeError(
        `cordon: executor options.callbackOrigins: ${JSON.stringify(origin)} is not an http(s) origin such as https://app.internal:8443`,
      );
    }
  }
  return value as string[];
}

function positive(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0)
    throw new TypeError(`cordon: executor options.${name} must be a positive number, got ${String(value)}`);
  return value;
}

function whole(value: unknown, name: string, fallback: number): number {
  const n = positive(value, name, fallback);
  if (!Number.isInteger(n)) throw new TypeError(`cordon: executor options.${name} must be a whole number, got ${n}`);
  return n;
}

/** A grace period: 0 up to MAX_TIME_MS (Node's timers take no longer: past 2^31 − 1 one fires at once). */
function graceMs(value: unknown, name: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0 || value > MAX_TIME_MS)
    throw new TypeError(`cordon: executor options.${name} must be a number from 0 to ${MAX_TIME_MS} (ms), got ${String(value)}`);
  return value;
}

let version: string | undefined;
/** cordon's version, from package.json (two levels up from both src/executor and dist/executor). */
function packageVersion(): string {
  version ??= String(
    (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version?: unknown }).version,
  );
  return version;
}
