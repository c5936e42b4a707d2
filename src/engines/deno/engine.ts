import { createHash } from "node:crypto";
import type { Engine, EnginePrepareRequest, EngineRunRequest, EngineStats } from "../../core/engine.js";
import { useSpawner } from "../../core/spawner.js";
import { CordonError } from "../../core/errors.js";
import type { ResolvedLimits } from "../../core/limits.js";
import { Residency } from "../../core/residency.js";
import type { RunResult, SandboxStats } from "../../core/types.js";
import { Execution } from "../execution.js";
import { RunningExecutions } from "../running-executions.js";
import { fence } from "../instance.js";
import { instanceFailure, type PooledEngineOptions } from "../pooled-engine.js";
import { Spares } from "../spares.js";
import { BlockingBudget } from "../blocking-budget.js";
import { WarmPool } from "../warm-pool.js";
import { DenoInstance } from "./instance.js";
import { FunctionPool, type FunctionPoolOptions } from "./pool.js";
import { privateTempDir } from "./private-dir.js";
import { mkfifoCommand } from "./fifos.js";
import { denoBinary } from "./script.js";
import { currentSeed } from "./seed.js";
import type { ImportProxy, ImportProxyOptions } from "../../egress/import-proxy.js";

export interface DenoEngineOptions extends PooledEngineOptions {
  functions?: Partial<FunctionPoolOptions>;
  /** Where Deno keeps the npm packages and remote modules it downloads. Default: a `cordon-deno-cache` directory in the OS temp dir. */
  cacheDir?: string;
  /** Deno loads npm packages and remote modules only from the cache (it fetches nothing itself). */
  cachedOnly?: boolean;
  /** The bound on each process's private directory, in MB. Default 64. */
  diskMb?: number;
  /** How the import proxy checks remote imports: `policy.net`'s internalOrigins and DNS servers. */
  importProxy?: Pick<ImportProxyOptions, "internalOrigins" | "resolve">;
}

/**
 * Where Deno fetches `npm:` packages from (NPM_CONFIG_REGISTRY is never set for it). Every
 * process fetches through the import proxy, so every grant names the registry (checked and
 * pinned like any import host).
 */
const NPM_REGISTRY = "registry.npmjs.org:443";

/** The deno engine: a Deno process per function, with cordon's limits, egress and bridge. */
export function createDenoEngine(options: DenoEngineOptions): DenoEngine {
  const binary = denoBinary();
  if (!binary) {
    throw new CordonError(
      "ERR_ENGINE_UNAVAILABLE",
      'cordon: engine "deno" needs the deno npm package (its binary was not found)',
    );
  }
  mkfifoCommand();
  return new DenoEngine(binary, options);
}

export class DenoEngine implements Engine {
  readonly name = "deno" as const;
  private readonly spares: Spares<DenoInstance>;
  private readonly residency: Residency;
  private readonly pools = new Set<WarmPool>();
  /** How long calls may block a thread, for all prefixes together (blocking-budget.ts). */
  private readonly blocking = new BlockingBudget();
  private readonly functions: FunctionPool;
  private readonly live = new Set<DenoInstance>();
  /** Processes being started: dispose() waits until each is running or ended. */
  private readonly creating = new Set<Promise<DenoInstance>>();
  private readonly cacheDir: string;
  /** Runs and calls in progress, its prefixes' too: disposing the engine ends them. */
  private readonly running = new RunningExecutions();
  private disposed = false;
  /** This engine's use of the spawner process, released when it is disposed. */
  private readonly releaseSpawner: () => void;
  /** Started with the first process; Deno fetches remote modules and npm packages through it. */
  private importProxy: Promise<ImportProxy> | undefined;

  constructor(
    private readonly binary: string,
    private readonly options: DenoEngineOptions,
  ) {
    this.cacheDir = options.cacheDir ?? privateTempDir("cordon-deno-cache");
    this.spares = new Spares(options.spares, options.memoryMb, (memoryMb) => this.create(memoryMb, []));
    this.residency = new Residency(options.budgetBytes);
    this.functions = new FunctionPool({
      idleTtlMs: options.functions?.idleTtlMs ?? 60_000,
      maxInvocations: options.functions?.maxInvocations ?? 1000,
      softCap: options.functions?.softCap ?? 16,
    });
    // Deno processes start through the spawner process once it is ready: a fork of this process
    // per function start would block its event loop (core/spawner.ts).
    this.releaseSpawner = useSpawner();
  }

  private async create(memoryMb: number, importHosts: readonly string[]): Promise<DenoInstance> {
    if (this.disposed) throw new CordonError("ERR_INSTANCE_RESET", "the deno engine has been disposed");
    const { cacheDir, options } = this;
    // Remote imports and npm packages are fetched through the import proxy, which resolves and
    // checks each name itself: Deno, left to resolve them, reached any address a permitted
    // name's DNS pointed at.
    const grant = (await this.proxy()).grant([...importHosts, NPM_REGISTRY]);
    let instance: DenoInstance;
    try {
      // Live from its spawn, not from its first answer: dispose() must end processes still
      // starting too (it returned while 2–4 of them ran on, found by review).
      const creating = DenoInstance.create(
        {
          binary: this.binary,
          memoryMb,
          importHosts,
          cacheDir,
          seed: currentSeed(this.binary, cacheDir),
          cachedOnly: options.cachedOnly,
          diskMb: options.diskMb,
          importGrant: grant,
        },
        (spawned) => {
          this.live.add(spawned);
          spawned.process.child.onExit(() => {
            this.live.delete(spawned);
            grant.revoke();
          });
          // Spawned after dispose() began (its directories were being made): ended at once.
          if (this.disposed) spawned.dispose();
        },
      );
      this.creating.add(creating);
      instance = await creating.finally(() => this.creating.delete(creating));
    } catch (error) {
      grant.revoke();
      throw error;
    }
    // Warm prefixes too end a process after maxInvocations uses: each prefix run adds a module
    // instance Deno never frees.
    instance.maxUses = options.functions?.maxInvocations ?? 1000;
    if (this.disposed) instance.dispose();
    return instance;
  }

  private proxy(): Promise<ImportProxy> {
    this.importProxy ??= import("../../egress/import-proxy.js").then(({ ImportProxy }) =>
      ImportProxy.start(this.options.importProxy),
    );
    return this.importProxy;
  }

  /** A started process for a new function: a spare when one fits (no start-up on the critical path). */
  private async fresh(memoryMb: number, importHosts: readonly string[]): Promise<DenoInstance> {
    if (importHosts.length > 0) return this.create(memoryMb, importHosts);
    // A spare that died while it waited (killed from outside) is skipped, not handed a run.
    for (let tries = 0; tries < 3; tries++) {
      const spare = await this.spares.take(memoryMb);
      if (!spare.disposed) return spare;
    }
    return this.create(memoryMb, importHosts);
  }

  async run(request: EngineRunRequest): Promise<RunResult> {
    const { limits, signal, host, source, sourceImports, inputText, bindings } = request;
    const importHosts = request.importHosts ?? [];
    const modules = hostModulesText(bindings.text);
    const key = functionKey(
      source.code,
      source.filename,
      sourceImports,
      modules,
      request.callerLimits ?? limits,
      importHosts,
      request.partitionKey ?? "",
    );
    let taken = this.functions.take(key);
    while (taken instanceof Promise) {
      await taken;
      taken = this.functions.take(key);
    }
    let instance: DenoInstance;
    let warm = false;
    let ephemeral = false;
    if (taken && taken !== "busy") {
      instance = taken;
      warm = true;
    } else {
      try {
        instance = await this.fresh(limits.memoryMb, importHosts);
      } catch (error) {
        return instanceFailure(this.name, host, error);
      }
      // The function's process is busy with another run: this one gets a process of its own.
      ephemeral = taken === "busy" || !this.functions.adopt(key, instance);
    }
    instance.resetEachRun = true;
    const guestFiles = new Set([source.filename, ...Object.keys(sourceImports)]);
    const execution = new Execution(instance, { engine: this.name, limits, signal, host, warm, guestFiles });
    execution.evaluate({ bindings, mode: request.mode ?? "run", inputText, source, sourceImports });
    const result = await this.running.track(execution, execution.outcome);
    instance.listener = undefined;
    if (ephemeral) instance.dispose();
    // Past the wall time the process is tainted, and the pool retires it.
    else this.functions.settle(key, instance, fence(instance, limits.wallTimeMs));
    return result;
  }

  async prepare(request: EnginePrepareRequest): Promise<{ prefix: WarmPool; result: RunResult }> {
    const { coalesceAbove, maxInstances, maxQueued } = this.options;
    const importHosts = request.importHosts ?? [];
    const spares =
      importHosts.length === 0
        ? this.spares
        : new Spares<DenoInstance>(0, request.limits.memoryMb, (mb) => this.create(mb, importHosts));
    const limits = { coalesceAbove, maxInstances, blocking: this.blocking };
    const pool = new WarmPool(this.name, request, spares, this.residency, limits, maxQueued, this.running);
    pool.onDispose = () => this.pools.delete(pool);
    const { instance, result } = await pool.warmUp();
    if (instance) {
      pool.adopt(instance);
      this.pools.add(pool);
    }
    return { prefix: pool, result };
  }

  stats(): EngineStats & { workers: NonNullable<SandboxStats["workers"]> } {
    const prefixes = [...this.pools].map((p) => p.counts());
    return {
      warmInstances: prefixes.reduce((n, p) => n + p.warm, 0) + this.functions.size,
      idleInstances: this.residency.idleCount + this.functions.idle,
      idleHeapBytes: this.residency.idleBytes,
      budgetBytes: this.residency.budgetBytes,
      spareInstances: this.spares.count,
      prefixes,
      workers: [...this.live]
        .filter((i) => !i.disposed)
        .map((i) => ({
          pid: i.process.pid,
          partition: i.functionKey ? `function:${i.functionKey.slice(0, 16)}` : "",
          busy: i.listener ? 1 : 0,
          runs: i.uses,
          rssBytes: i.process.rss() ?? 0,
        })),
    };
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    this.running.endAll();
    for (const pool of this.pools) pool.end();
    this.pools.clear();
    this.functions.dispose();
    this.spares.dispose();
    const exits = [...this.live].map(
      (instance) =>
        new Promise<void>((resolve) => {
          if (instance.process.exited) return resolve();
          instance.process.child.onExit(() => resolve());
          instance.dispose();
          instance.process.kill("disposed");
          setTimeout(resolve, 3000).unref();
        }),
    );
    await Promise.all(exits);
    // Those spawned meanwhile were ended as they spawned; each settles once it has exited.
    await Promise.allSettled([...this.creating]);
    this.live.clear();
    await this.importProxy?.then(
      (proxy) => proxy.close(),
      () => {},
    );
    this.releaseSpawner();
  }
}

/**
 * A function is its code, its files and imports (host modules included), its limits and its import
 * hosts: any change is a new process. Deno evaluates a module once per process, so a host module's
 * object is the first run's: keyed by code alone, a later run with other `imports` got the first
 * run's data (another tenant's config) and function numbers that named its own other functions.
 * Its partition key too: two tenants running the same code shared a process (its files, its state).
 */
export function functionKey(
  code: string,
  filename: string,
  sourceImports: Record<string, string>,
  hostModules: string,
  limits: ResolvedLimits,
  importHosts: readonly string[],
  partitionKey = "",
): string {
  return createHash("sha256")
    .update(JSON.stringify([code, filename, sourceImports, hostModules, limits, importHosts, partitionKey]))
    .digest("hex");
}

/** The host modules' part of a bindings descriptor (their data and function numbers), as text. */
function hostModulesText(bindingsText: string): string {
  const modules = (JSON.parse(bindingsText) as { modules?: unknown }).modules;
  return modules === undefined ? "{}" : JSON.stringify(modules);
}
