import { randomUUID } from "node:crypto";
import type { Engine } from "../core/engine.js";
import { resolveLimits } from "../core/limits.js";
import type { RemoteRequest } from "../core/protocol.js";
import { abortedResult, failedResult } from "../core/results.js";
import type { Slots } from "../core/slots.js";
import type { RunResult, SandboxPolicy } from "../core/types.js";
import { CallbackBindings } from "./callback-bindings.js";
import { addressKey } from "./connections.js";
import { ServiceError } from "./errors.js";
import type { RemotePrefixes } from "./remote-prefixes.js";
import type { RunAborts } from "./run-aborts.js";

export interface HostRouteDeps {
  /** The engine of that name on this executor's host (made on first use). */
  engine(name: RemoteRequest["engine"]): Promise<Engine>;
  /** The executor's ceilings: a client's limits are clamped again here, never widened. */
  policy: SandboxPolicy;
  prefixes: RemotePrefixes;
  /** Runs (not calls) hold a slot, as they do in a sandbox. */
  slots: Slots;
  /** Runs and calls a client may abort by message. */
  aborts: RunAborts;
}

/** What `POST /host` answers: a RunResult (with a prefix handle after a prepare that evaluated), a gone prefix, or nothing. */
export type HostAnswer = { result: RunResult; prefix?: string; load?: string } | { gone: true } | { done: true };

/**
 * One remote-host request on this executor: the same Engine seam the sandbox drives locally,
 * with bindings that call back to the client's host. `signal` is the HTTP request's: a client
 * that goes away drops its run while it waits for a slot (nobody would read its answer, and it
 * would hold the slot from everyone else), and aborts a started one only when it said the run may
 * be aborted (calls that cannot be aborted may coalesce in the engine). An `abort` request naming
 * a run's abortId does the same, and the run is still answered (its logs with it).
 */
export async function answerHostRequest(
  deps: HostRouteDeps,
  request: RemoteRequest,
  signal: AbortSignal,
  /** The requester's address (its prefixes count against its own share) and client id (CLIENT_HEADER; "" for none). */
  requester: { address?: string; client: string } = { client: "" },
): Promise<HostAnswer> {
  if (request.t === "prefix-dispose") {
    deps.prefixes.dispose(request.prefix);
    return { done: true };
  }
  // Answered either way: a run that has just ended is no client's mistake.
  if (request.t === "abort") {
    deps.aborts.abort(requester.client, request.abortId, request.reason, addressKey(requester.address));
    return { done: true };
  }
  let engine: Engine;
  try {
    engine = await deps.engine(request.engine);
  } catch (error) {
    return {
      result: failedResult(request.engine, "remote", {
        code: "ERR_ENGINE_UNAVAILABLE",
        name: "CordonError",
        message: `the executor cannot run the ${request.engine} engine: ${(error as Error).message}`,
      }),
    };
  }
  // Its own signal too, for an abort by message: the answer still goes back on this request.
  const byId = "abortId" in request && request.abortId ? deps.aborts.begin(requester.client, request.abortId) : undefined;
  try {
    const answer = await answerWith(engine, deps, request, byId ? AbortSignal.any([signal, byId.signal]) : signal, {
      owner: addressKey(requester.address),
      client: requester.client,
    });
    if ("result" in answer) answer.load = loadOf(engine);
    return answer;
  } finally {
    byId?.end();
  }
}

/** The engine's load as LOAD_HEADER carries it: the stats after this answer. */
function loadOf(engine: Engine): string {
  const stats = engine.stats();
  return [stats.warmInstances, stats.idleInstances, stats.idleHeapBytes, stats.budgetBytes, stats.spareInstances].join(",");
}

async function answerWith(
  engine: Engine,
  deps: HostRouteDeps,
  request: Exclude<RemoteRequest, { t: "prefix-dispose" } | { t: "abort" }>,
  signal: AbortSignal,
  { owner, client }: { owner: string; client: string },
): Promise<HostAnswer> {
  const started = performance.now();
  const limits = resolveLimits(request.limits, {}, deps.policy);
  const runSignal = "abortable" in request && request.abortable ? signal : undefined;

  switch (request.t) {
    case "run": {
      const bindings = new CallbackBindings(request.bindingsText, request.callback);
      const { source, sourceImports, inputText, mode } = request;
      try {
        const result = await withSlot(deps.slots, engine, signal, started, () =>
          engine.run({ source, sourceImports, bindings, inputText, limits, signal: runSignal, host: "remote", mode }),
        );
        return { result };
      } finally {
        bindings.close();
      }
    }
    case "prepare": {
      // Refused before any work when the prefixes held (and in use) leave no room for it.
      const bytes = keptChars(request);
      const full = deps.prefixes.room(owner, bytes, request.key, client);
      if (full) return { result: capacityFailure(engine, full, started) };
      const bindings = new CallbackBindings(request.bindingsText, request.callback);
      // Never the client's key alone: two clients' prefixes with equal keys call back to
      // different hosts, so they must never share a warm instance.
      const key = `${request.key}/${randomUUID()}`;
      const { source, sourceImports, partitionKey } = request;
      // The prefix's evaluation is guest code like a run's: it holds a run slot too.
      let prepared: Awaited<ReturnType<Engine["prepare"]>> | undefined;
      const result = await withSlot(deps.slots, engine, signal, started, async () => {
        prepared = await engine.prepare({ key, partitionKey, source, sourceImports, bindings, limits, host: "remote" });
        return prepared.result;
      });
      // A client that went away meanwhile never learns the handle: nothing could use or end it.
      if (!result.ok || !prepared || signal.aborted) {
        prepared?.prefix.dispose();
        bindings.close();
        return { result };
      }
      // Others may have taken the room meanwhile.
      const held = deps.prefixes.add(prepared.prefix, bindings, owner, bytes, request.key, client);
      if ("refused" in held) {
        prepared.prefix.dispose();
        bindings.close();
        return { result: capacityFailure(engine, held.refused, started) };
      }
      return { result, prefix: held.handle };
    }
    case "prefix-run": {
      const answer = await deps.prefixes.use(request.prefix, (held) => {
        renewGrant(held.bindings, request.callback);
        return withSlot(deps.slots, engine, signal, started, () =>
          held.prefix.run({ source: request.source, sourceImports: {}, inputText: request.inputText, limits, signal: runSignal }),
        );
      });
      return answer ? { result: answer } : { gone: true };
    }
    case "prefix-call": {
      const answer = await deps.prefixes.use(request.prefix, (held) => {
        renewGrant(held.bindings, request.callback);
        return held.prefix.call({ path: request.path, argsText: request.argsText, limits, signal: runSignal });
      });
      return answer ? { result: answer } : { gone: true };
    }
  }
}

/** What a held prefix keeps to be prepared again: its source, imports and bindings, in characters. */
function keptChars(request: Extract<RemoteRequest, { t: "prepare" }>): number {
  let chars = request.source.code.length + (request.source.script?.code.length ?? 0) + request.bindingsText.length;
  for (const text of Object.values(request.sourceImports)) chars += text.length;
  return chars;
}

function capacityFailure(engine: Engine, why: string, started: number): RunResult {
  const message = `the executor cannot hold another prefix: ${why}`;
  return failedResult(engine.name, "remote", { code: "ERR_CAPACITY", name: "CordonError", message }, performance.now() - started);
}

/** The request's grant, kept if it expires later than the prefix's; a 400 when it is not the prefix's. */
function renewGrant(bindings: CallbackBindings, callback: RemoteRequest["callback"]): void {
  const refused = bindings.renew(callback);
  if (refused) throw new ServiceError("ERR_BAD_REQUEST", refused);
}

/** `work` once a slot is held; `signal` (the HTTP request's) drops the run while it waits for one. */
async function withSlot(
  slots: Slots,
  engine: Engine,
  signal: AbortSignal,
  started: number,
  work: () => Promise<RunResult>,
): Promise<RunResult> {
  const held = await slots.acquire(signal);
  if (!held) {
    const wallMs = performance.now() - started;
    if (signal.aborted) {
      // An abort request's reason (a string), else the request was closed.
      const reason = typeof signal.reason === "string" ? signal.reason : "the client went away while the run was queued";
      return abortedResult(engine.name, "remote", reason, wallMs);
    }
    return failedResult(
      engine.name,
      "remote",
      { code: "ERR_QUEUE_FULL", name: "CordonError", message: "the executor's run queue is full; retry later" },
      wallMs,
    );
  }
  try {
    return await work();
  } finally {
    slots.release();
  }
}
