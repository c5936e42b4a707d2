/**
 * Creating a sandbox: its options checked, the engine and host chosen (from the options, then
 * the environment), and the engine built for that host.
 */
import { availableParallelism, totalmem } from "node:os";
import { DEFAULT_BUSY_POLL_MS } from "./core/busy-poll.js";
import type { Engine } from "./core/engine.js";
import { CordonError } from "./core/errors.js";
import { checkPolicy, checkPositiveNumber, MAX_TIME_MS, resolveLimits } from "./core/limits.js";
import { isHeaderSafeSecret, MIN_SECRET_BYTES } from "./core/secret-shape.js";
import { checkOneOf, checkString, ownOptions } from "./core/options.js";
import { ENGINES, environmentDefaults, HOSTS } from "./core/selection.js";
import type { EngineName, HostName, RemoteOptions, SandboxOptions } from "./core/types.js";
import type { PooledEngineOptions } from "./engines/pooled-engine.js";
import { MAX_SPARES } from "./engines/spares.js";
import { isolatedVmAvailable } from "./engines/v8/load.js";
import { checkNetPolicy, egressResolve } from "./capabilities.js";
import { Sandbox } from "./sandbox.js";

type ConcreteHost = Exclude<HostName, "auto">;

const SANDBOX_KEYS = [
  "workers",
  "isolateProcesses",
  "engine",
  "host",
  "memoryMb",
  "memoryBudgetMb",
  "maxConcurrentRuns",
  "maxQueuedRuns",
  "policy",
  "spareInstances",
  "busyPollMs",
  "remote",
  "deno",
];

/** Create a sandbox. Throws a TypeError naming the option for misconfiguration. */
export async function createSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  // Only the copy is read from here on: own keys, each read once (see ownOptions). A polluted
  // Object.prototype.engine of "trusted" would otherwise have turned the sandbox into none at all.
  const checked = ownOptions(options, SANDBOX_KEYS, "options") as SandboxOptions;
  const fromEnvironment = environmentDefaults();
  const engineName = checkOneOf(checked.engine ?? fromEnvironment.engine, ENGINES, "options.engine");
  const hostName = checkOneOf(checked.host ?? fromEnvironment.host, HOSTS, "options.host");
  if (checked.memoryMb !== undefined) checkPositiveNumber("options.memoryMb", checked.memoryMb);
  if (checked.maxConcurrentRuns !== undefined)
    checkPositiveNumber("options.maxConcurrentRuns", checked.maxConcurrentRuns, { integer: true });
  if (checked.maxQueuedRuns !== undefined && checked.maxQueuedRuns !== 0) {
    checkPositiveNumber("options.maxQueuedRuns", checked.maxQueuedRuns, { integer: true });
  }
  if (checked.memoryBudgetMb !== undefined) checkPositiveNumber("options.memoryBudgetMb", checked.memoryBudgetMb);
  if (checked.spareInstances !== undefined && checked.spareInstances !== 0) {
    // Bounded: each spare is a whole instance, all made up front (100000 of them took gigabytes).
    checkPositiveNumber("options.spareInstances", checked.spareInstances, { integer: true, max: MAX_SPARES });
  }
  checkBusyPoll(checked.busyPollMs, "options.busyPollMs");
  const policy = checkPolicy(checked.policy);
  await checkNetPolicy(policy.net);

  const workers = checkWorkers(checked.workers);
  const isolateProcesses = checkOneOf(
    checked.isolateProcesses ?? "shared",
    ["shared", "partition"] as const,
    "options.isolateProcesses",
  );
  if (engineName === "trusted") {
    // No sandbox at all: it runs in this process, and only when named.
    if (hostName !== "auto" && hostName !== "inprocess") {
      throw new TypeError(
        `cordon: the trusted engine runs in this process; host must be "inprocess" or "auto", got "${hostName}"`,
      );
    }
    const { TrustedEngine } = await import("./engines/trusted/engine.js");
    return new Sandbox(new TrustedEngine(), "inprocess", policy, checked);
  }
  if (engineName === "deno") {
    // Each function gets Deno processes of its own, supervised from this process: the deno engine
    // is its own process host. "auto" means that; cordon's worker processes ("process") do not host it.
    if (hostName !== "auto" && hostName !== "inprocess") {
      throw new TypeError(
        `cordon: the deno engine runs every function in Deno processes of its own, supervised from this process; host must be "inprocess" or "auto", got "${hostName}"`,
      );
    }
  }
  // The deno engine never runs remotely: CORDON_EXEC_URL does not apply to it.
  const remote = engineName === "deno" ? undefined : checkRemote(checked.remote, fromEnvironment);
  const host = engineName === "deno" ? "inprocess" : selectHost(hostName, remote);
  if (host === "remote" && remote) {
    const { ExecutorClient } = await import("./hosts/remote/client.js");
    const { Callbacks } = await import("./hosts/remote/callbacks.js");
    const { RemoteHost } = await import("./hosts/remote/host.js");
    const client = new ExecutorClient(remote.url, remote.secret);
    // "auto" is the executor's choice: asked once, or guessed from what loads here when it is down.
    let name: "v8" | "quickjs";
    if (engineName === "v8" || engineName === "quickjs") name = engineName;
    else if (engineName === "auto") {
      const reported = await client.engine();
      name = reported === "v8" || reported === "quickjs" ? reported : isolatedVmAvailable() ? "v8" : "quickjs";
    } else throw new TypeError(`cordon: the remote host runs the v8 or quickjs engine, not "${engineName}"`);
    return new Sandbox(new RemoteHost(name, client, new Callbacks(remote.callback)), "remote", policy, checked);
  }
  const engineChoice = resolveEngine(engineName);
  const memoryMb = resolveLimits({}, checked.memoryMb === undefined ? {} : { memoryMb: checked.memoryMb }, policy).memoryMb;
  const budgetMb = checked.memoryBudgetMb ?? Math.min(1024, Math.floor(totalmem() / 1024 / 1024 / 4));
  const engineOptions: PooledEngineOptions = {
    memoryMb,
    spares: checked.spareInstances ?? 2,
    budgetBytes: budgetMb * 1024 * 1024,
    coalesceAbove: availableParallelism(),
    maxInstances: checked.maxConcurrentRuns ?? availableParallelism() * 4,
    maxQueued: checked.maxQueuedRuns ?? 10_000,
    busyPollMs: checked.busyPollMs ?? DEFAULT_BUSY_POLL_MS,
  };
  let engine: Engine;
  if (engineChoice === "deno") {
    const deno = checkDeno(checked.deno);
    const { createDenoEngine } = await import("./engines/deno/engine.js");
    const { cachedOnly, cacheDir, diskMb, ...functions } = deno;
    const importProxy = { internalOrigins: policy.net?.internalOrigins, resolve: await egressResolve(policy) };
    engine = createDenoEngine({ ...engineOptions, functions, cachedOnly, cacheDir, diskMb, importProxy });
  } else if (host === "process") {
    const { ProcessHost } = await import("./hosts/process/host.js");
    // The workers' engines never poll: with the pipe polled too that made three spinning threads
    // per call (decision 012). workers.busyPollMs is the pipe's window, on both sides.
    const workerEngineOptions = { ...engineOptions, busyPollMs: 0 };
    const poolOptions = {
      min: workers.min ?? 1,
      softCap: workers.max ?? availableParallelism(),
      idleTtlMs: workers.idleTtlMs ?? 60_000,
      maxRunsPerWorker: workers.maxRunsPerWorker ?? 10_000,
      maxRssMb: workers.maxRssMb,
      rssSlackMb: workers.rssSlackMb ?? 256,
      isolateProcesses,
      entry: workers.entry,
    };
    engine = new ProcessHost(engineChoice as "v8" | "quickjs", workerEngineOptions, poolOptions, workers.busyPollMs ?? 0);
  } else {
    engine = await createInProcessEngine(engineChoice as "v8" | "quickjs", engineOptions);
  }
  return new Sandbox(engine, host, policy, checked);
}

/** "auto": remote when an executor is configured, else the process host (a guest can then kill at most a worker). */
function selectHost(name: HostName, remote: RemoteOptions | undefined): ConcreteHost {
  if (name === "remote" && !remote) {
    throw new CordonError(
      "ERR_ENGINE_UNAVAILABLE",
      'cordon: host "remote" needs an executor: options.remote ({ url, secret }) or CORDON_EXEC_URL and CORDON_EXEC_SECRET',
    );
  }
  if (name === "remote" || (name === "auto" && remote)) return "remote";
  if (name === "auto" || name === "process") return "process";
  if (name === "inprocess") return "inprocess";
  throw new CordonError(
    "ERR_ENGINE_UNAVAILABLE",
    `cordon: host "${name}" is not available in this version; use "process", "inprocess" or "remote"`,
  );
}

/** `options.remote`, else the environment's executor; a URL without a usable secret is misconfiguration. */
function checkRemote(given: unknown, env: { execUrl?: string; execSecret?: string }): RemoteOptions | undefined {
  if (given === undefined) {
    if (!env.execUrl) return undefined;
    given = { url: env.execUrl, secret: env.execSecret };
  }
  const value = ownOptions(given, ["url", "secret", "callback"], "options.remote");
  const url = checkString(value.url, "options.remote.url (or CORDON_EXEC_URL)", 2048);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`cordon: options.remote.url must be an http(s) URL, got ${JSON.stringify(url.slice(0, 80))}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new TypeError(`cordon: options.remote.url must be an http(s) URL, got ${JSON.stringify(url.slice(0, 80))}`);
  if (typeof value.secret !== "string" || Buffer.byteLength(value.secret) < MIN_SECRET_BYTES) {
    // Never the secret itself in the message: it may end up in a log.
    throw new TypeError(
      `cordon: options.remote.secret (or CORDON_EXEC_SECRET) must be the executor's secret, at least ${MIN_SECRET_BYTES} bytes`,
    );
  }
  // The executor's own rule: such a secret was refused (or mangled) on every request, as
  // ERR_EXECUTOR_UNREACHABLE or a 401, instead of at start-up.
  if (!isHeaderSafeSecret(value.secret)) {
    throw new TypeError(
      "cordon: options.remote.secret (or CORDON_EXEC_SECRET) must be visible ASCII characters only (no spaces, line breaks or other characters); trim a secret read from a file",
    );
  }
  const callback =
    value.callback === undefined
      ? undefined
      : ownOptions(value.callback, ["url", "rpc", "host", "port"], "options.remote.callback");
  return { url, secret: value.secret, callback } as RemoteOptions;
}

/** "auto": v8 when isolated-vm loads, else quickjs (no native build needed). Never deno: only when named. */
function resolveEngine(name: EngineName): "v8" | "quickjs" | "deno" {
  if (name === "deno") return "deno";
  if (name === "v8") {
    if (!isolatedVmAvailable())
      throw new CordonError("ERR_ENGINE_UNAVAILABLE", 'cordon: engine "v8" needs isolated-vm, which did not load here');
    return "v8";
  }
  if (name === "quickjs") return "quickjs";
  if (name === "auto") return isolatedVmAvailable() ? "v8" : "quickjs";
  throw new CordonError(
    "ERR_ENGINE_UNAVAILABLE",
    `cordon: engine "${name}" is not available in this version; use "v8" or "quickjs"`,
  );
}

async function createInProcessEngine(name: "v8" | "quickjs", options: PooledEngineOptions): Promise<Engine> {
  if (name === "v8") {
    const { createV8Engine } = await import("./engines/v8/engine.js");
    return createV8Engine(options);
  }
  const { quickjsAvailable } = await import("./engines/quickjs/threads.js");
  if (!quickjsAvailable()) throw new CordonError("ERR_ENGINE_UNAVAILABLE", "cordon: the quickjs engine's packages did not load");
  const { createQuickJSEngine } = await import("./engines/quickjs/engine.js");
  return createQuickJSEngine(options);
}

function checkDeno(given: unknown): NonNullable<SandboxOptions["deno"]> {
  if (given === undefined) return {};
  const value = ownOptions(given, ["idleTtlMs", "maxInvocations", "softCap", "cachedOnly", "cacheDir", "diskMb"], "options.deno");
  for (const key of ["idleTtlMs", "maxInvocations", "softCap", "diskMb"]) {
    if (value[key] !== undefined) checkPositiveNumber(`options.deno.${key}`, value[key], COUNT_OPTIONS[key]);
  }
  if (value.cachedOnly !== undefined && typeof value.cachedOnly !== "boolean") {
    throw new TypeError("cordon: options.deno.cachedOnly must be a boolean");
  }
  if (value.cacheDir !== undefined) checkString(value.cacheDir, "options.deno.cacheDir", 4096);
  return value as NonNullable<SandboxOptions["deno"]>;
}

/**
 * Options that count processes or uses are integers, and processes are bounded: a pool told to keep
 * Infinity workers would fork forever. Times are bounded by what a Node timer takes.
 */
const MAX_PROCESSES = 1024;
const COUNT_OPTIONS: Record<string, { integer?: boolean; max?: number }> = {
  min: { integer: true, max: MAX_PROCESSES },
  max: { integer: true, max: MAX_PROCESSES },
  softCap: { integer: true, max: MAX_PROCESSES },
  maxRunsPerWorker: { integer: true },
  maxInvocations: { integer: true },
  diskMb: { max: 1024 * 1024 },
  idleTtlMs: { max: MAX_TIME_MS },
};

const WORKER_KEYS = ["min", "max", "idleTtlMs", "maxRunsPerWorker", "maxRssMb", "rssSlackMb", "busyPollMs", "entry"];

/** 0 (off) or a positive number of milliseconds, at most 100. */
function checkBusyPoll(value: unknown, name: string): void {
  if (value === undefined || value === 0) return;
  if (checkPositiveNumber(name, value) > 100)
    throw new TypeError(`cordon: ${name} must be at most 100 (it burns CPU for that long)`);
}

function checkWorkers(given: unknown): NonNullable<SandboxOptions["workers"]> & { entry?: string } {
  if (given === undefined) return {};
  const value = ownOptions(given, WORKER_KEYS, "options.workers");
  for (const key of ["min", "max", "idleTtlMs", "maxRunsPerWorker", "maxRssMb", "rssSlackMb"]) {
    if (value[key] !== undefined) checkPositiveNumber(`options.workers.${key}`, value[key], COUNT_OPTIONS[key]);
  }
  checkBusyPoll(value.busyPollMs, "options.workers.busyPollMs");
  return value as NonNullable<SandboxOptions["workers"]> & { entry?: string };
}
