import { randomUUID } from "node:crypto";
import type {
  Engine,
  EnginePrefix,
  EnginePrepareRequest,
  EngineRunRequest,
  EngineStats,
  PrefixCallRequest,
  PrefixCounts,
  PrefixRunRequest,
} from "../../core/engine.js";
import type { RemoteRequest } from "../../core/protocol.js";
import { signalReason } from "../../core/abort-reason.js";
import { abortedResult, failedResult, heldPrefixResult } from "../../core/results.js";
import type { RunResult } from "../../core/types.js";
import type { Callbacks, Registration } from "./callbacks.js";
import { untilAborted } from "../until-aborted.js";
import { DEADLINE_SLACK_MS, type ExecutorClient } from "./client.js";

type RemoteEngine = RemoteRequest["engine"];

/**
 * The remote host: every engine request goes to an executor service (`cordon serve`) over HTTP,
 * and the guest's calls to host functions come back as callbacks carrying a per-run grant. It
 * implements the same Engine seam as the local hosts, so every API of the sandbox works the same.
 */
export class RemoteHost implements Engine {
  private readonly prefixes = new Set<RemotePrefix>();

  constructor(
    readonly name: RemoteEngine,
    private readonly client: ExecutorClient,
    private readonly callbacks: Callbacks,
  ) {}

  async run(request: EngineRunRequest): Promise<RunResult> {
    const { source, sourceImports, bindings, inputText, limits, mode, signal } = request;
    let registration: Registration | undefined;
    try {
      registration = await this.callbacks.register(bindings, "run", limits.wallTimeMs + DEADLINE_SLACK_MS);
    } catch (error) {
      return callbackFailure(this.name, error);
    }
    try {
      const answer = await this.client.send(
        {
          engine: this.name,
          t: "run",
          source,
          sourceImports,
          bindingsText: bindings.text,
          inputText,
          limits,
          mode,
          ...abortFields(signal),
          callback: registration?.callback,
        },
        limits.wallTimeMs,
        signal,
      );
      return "result" in answer ? answer.result : goneFailure(this.name);
    } finally {
      registration?.unregister();
    }
  }

  async prepare(request: EnginePrepareRequest): Promise<{ prefix: EnginePrefix; result: RunResult }> {
    const prefix = new RemotePrefix(this.name, this.client, this.callbacks, request, () => this.prefixes.delete(prefix));
    const result = await prefix.ensure();
    if (result.ok) this.prefixes.add(prefix);
    else prefix.dispose();
    return { prefix, result };
  }

  /**
   * The executor engine's instances and budget as its last answer reported them (shared by every
   * client of that executor), and this client's own prefixes.
   */
  stats(): EngineStats {
    const [warmInstances, idleInstances, idleHeapBytes, budgetBytes, spareInstances] = this.client.load;
    return {
      warmInstances,
      idleInstances,
      idleHeapBytes,
      budgetBytes,
      spareInstances,
      prefixes: [...this.prefixes].map((p) => p.counts()),
    };
  }

  async dispose(): Promise<void> {
    for (const prefix of this.prefixes) prefix.dispose();
    this.prefixes.clear();
    await Promise.all([this.client.close(), this.callbacks.close()]);
  }
}

/**
 * A prefix held by the executor under an unguessable handle. When the executor no longer holds
 * it (restarted, idle too long), the next request prepares it again, cold, and goes on.
 */
class RemotePrefix implements EnginePrefix {
  private handle: string | undefined;
  private registration: Registration | undefined;
  private preparing: Promise<RunResult> | undefined;
  private busy = 0;
  /** Of the busy, those waiting for the prefix to be prepared again: stats count them as queued. */
  private waiting = 0;
  private disposed = false;

  constructor(
    private readonly engine: RemoteEngine,
    private readonly client: ExecutorClient,
    private readonly callbacks: Callbacks,
    private readonly request: EnginePrepareRequest,
    private readonly onDispose: () => void,
  ) {}

  ensure(): Promise<RunResult> {
    if (this.handle !== undefined) return Promise.resolve(heldPrefixResult(this.engine, "remote"));
    this.preparing ??= this.prepareOnce().finally(() => {
      this.preparing = undefined;
    });
    return this.preparing;
  }

  private async prepareOnce(): Promise<RunResult> {
    const { key, partitionKey, source, sourceImports, bindings, limits } = this.request;
    const ttl = limits.wallTimeMs + DEADLINE_SLACK_MS;
    try {
      // Scoped: the executor may call back only while a request of this prefix is in flight.
      this.registration ??= await this.callbacks.register(bindings, partitionKey || "prefix", ttl, true);
    } catch (error) {
      return callbackFailure(this.engine, error);
    }
    const registration = this.registration;
    const answer = await this.client
      .send(
        {
          engine: this.engine,
          t: "prepare",
          key,
          partitionKey,
          source,
          sourceImports,
          bindingsText: bindings.text,
          limits,
          callback: registration?.renew(ttl),
        },
        limits.wallTimeMs,
      )
      .finally(() => registration?.done());
    if (!("result" in answer)) return goneFailure(this.engine);
    if (answer.prefix !== undefined) {
      this.handle = answer.prefix;
    }
    // Disposed while preparing: the executor's copy goes too, and the grant's registration; once
    // the runs and calls made before the dispose, which waited for this prepare, are answered.
    if (this.disposed && this.busy === 0) {
      this.release();
      this.registration?.unregister();
      this.registration = undefined;
    }
    return answer.result;
  }

  run(request: PrefixRunRequest): Promise<RunResult> {
    return this.send(request.limits.wallTimeMs, request.signal, (prefix, callback) => ({
      engine: this.engine,
      t: "prefix-run",
      prefix,
      source: request.source,
      inputText: request.inputText,
      limits: request.limits,
      ...abortFields(request.signal),
      callback,
    }));
  }

  call(request: PrefixCallRequest): Promise<RunResult> {
    return this.send(request.limits.wallTimeMs, request.signal, (prefix, callback) => ({
      engine: this.engine,
      t: "prefix-call",
      prefix,
      path: request.path,
      argsText: request.argsText,
      limits: request.limits,
      ...abortFields(request.signal),
      callback,
    }));
  }

  private async send(
    wallTimeMs: number,
    signal: AbortSignal | undefined,
    message: (prefix: string, callback: RemoteRequest["callback"]) => RemoteRequest,
  ): Promise<RunResult> {
    this.busy++;
    try {
      // Once more after the executor lost the prefix: prepared again, that request is cold.
      for (let attempt = 0; attempt < 2; attempt++) {
        const warm = this.handle !== undefined;
        // A call aborted while it waits for a re-prepare is answered at its abort (it waited
        // for the whole prepare); the prepare goes on for the others.
        const prepared = warm ? await this.ensure() : await this.waitForPrepare(signal);
        if (!prepared) return abortedResult(this.engine, "remote", signalReason(signal as AbortSignal));
        if (!prepared.ok) return prepared;
        const handle = this.handle;
        if (handle === undefined) return goneFailure(this.engine);
        const registration = this.registration;
        const callback = registration?.renew(wallTimeMs + DEADLINE_SLACK_MS);
        const answer = await this.client.send(message(handle, callback), wallTimeMs, signal).finally(() => registration?.done());
        if ("result" in answer) {
          if (!warm) answer.result.stats.warm = false;
          return answer.result;
        }
        if (this.handle === handle) this.handle = undefined;
      }
      return goneFailure(this.engine);
    } finally {
      this.busy--;
      if (this.disposed && this.busy === 0) this.release();
    }
  }

  private async waitForPrepare(signal: AbortSignal | undefined): Promise<RunResult | undefined> {
    this.waiting++;
    try {
      return await untilAborted(this.ensure(), signal);
    } finally {
      this.waiting--;
    }
  }

  counts(): PrefixCounts {
    const held = this.handle !== undefined ? 1 : 0;
    const busy = this.busy - this.waiting;
    return { key: this.request.key.slice(0, 16), warm: held, idle: busy === 0 ? held : 0, busy, queued: this.waiting };
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    // Runs and calls made before this are served first, host functions included: the last one
    // releases (they failed "the run is over" once the grant went at dispose: found by review).
    if (this.busy === 0) this.release();
    this.onDispose();
  }

  private release(): void {
    const handle = this.handle;
    this.handle = undefined;
    if (handle !== undefined) this.client.notify({ engine: this.engine, t: "prefix-dispose", prefix: handle });
    if (!this.preparing) {
      this.registration?.unregister();
      this.registration = undefined;
    }
  }
}

function goneFailure(engine: RemoteEngine): RunResult {
  return failedResult(engine, "remote", {
    code: "ERR_INSTANCE_RESET",
    name: "CordonError",
    message: "the executor lost this prefix twice in a row; prepare it again",
  });
}

function callbackFailure(engine: RemoteEngine, error: unknown): RunResult {
  return failedResult(engine, "remote", {
    code: "ERR_INTERNAL",
    name: "CordonError",
    message: `the callback server for host bindings could not start: ${(error as Error)?.message ?? error}`,
  });
}

/**
 * What a request with `signal` says of its abort: that the executor may abort it, and the random
 * id an `abort` request names it by (client.ts, abortById). Without a signal, neither.
 */
function abortFields(signal: AbortSignal | undefined): { abortable: boolean; abortId?: string } {
  return signal ? { abortable: true, abortId: randomUUID() } : { abortable: false };
}
