import { Pool } from "undici";
import type { AnswerGate } from "../core/answer-gate.js";
import type { BindingsLike, BridgeAnswer } from "../core/bindings.js";
import { bridgeErrorText, TOO_LARGE } from "../core/bindings.js";
import { readCapped } from "../core/read-capped.js";
import { whenAborted } from "../core/when-aborted.js";
import { CALLBACK_ANSWER_HEADER, type RemoteCallback } from "../core/protocol.js";
import { peekGrant } from "../hosts/remote/grant.js";

/** A callback that has not answered in this long fails the guest's call (the run's own wall limit is usually first). */
const CALLBACK_TIMEOUT_MS = 120_000;

/**
 * A remote run's bindings on the executor: the descriptor the client sent, and a dispatch that
 * calls back to the client's host with the run's grant. The executor holds no host function and
 * no signing key: it can only present the grant it was given, for the names it lists.
 */
export class CallbackBindings implements BindingsLike {
  /** Callbacks in flight: a run that ended (or a prefix that went) abandons them at once. */
  private readonly inFlight = new Set<AbortController>();
  private closed = false;

  constructor(
    readonly text: string,
    private callback: RemoteCallback | undefined,
  ) {}

  /**
   * A prefix's later requests bring fresh grants (each expires soon after its request). Requests
   * overlap and may arrive out of order: the grant that expires last is kept, never one that
   * expires sooner (a short call would cut a long one's host calls off). A callback for another
   * run, URL or set of names is refused: the prefix's functions are numbered by its own names.
   * Returns why it was refused, or undefined.
   */
  renew(callback: RemoteCallback | undefined): string | undefined {
    if (!callback) return undefined;
    const held = this.callback;
    if (!held) return "callback: this prefix was prepared without host functions to call back";
    if (callback.run !== held.run || callback.url !== held.url || !sameNames(callback.names, held.names))
      return "callback: the grant is for another run than this prefix's (its run, URL and names must be the ones it was prepared with)";
    const fresh = peekGrant(callback.grant);
    if (fresh?.run !== callback.run) return "callback.grant: not a grant for callback.run";
    const current = peekGrant(held.grant);
    if (current === undefined || fresh.exp > current.exp) this.callback = callback;
    return undefined;
  }

  /**
   * End every callback in flight. A guest may leave hundreds of host calls pending (a function
   * that never settles) when its run is killed; left alone, they would hold the connections to
   * that host for other runs.
   */
  close(): void {
    this.closed = true;
    for (const controller of this.inFlight) controller.abort();
    this.inFlight.clear();
  }

  async dispatch(
    fnId: number,
    argsText: string,
    signal?: AbortSignal,
    maxBytes?: number,
    gate?: AnswerGate,
  ): Promise<BridgeAnswer> {
    const callback = this.callback;
    const name = callback?.names[fnId];
    if (!callback || name === undefined) return failure(new TypeError("unknown host function"));
    if (this.closed) return failure(new Error("the run is over"));
    const controller = new AbortController();
    this.inFlight.add(controller);
    // The run or call that made it ended: the callback's request is aborted, and the host stops it.
    const detach = whenAborted([signal], () => controller.abort());
    try {
      return await this.call(callback, name, argsText, controller.signal, maxBytes, gate);
    } finally {
      detach();
      this.inFlight.delete(controller);
    }
  }

  private async call(
    callback: RemoteCallback,
    name: string,
    argsText: string,
    signal: AbortSignal,
    maxBytes = Number.POSITIVE_INFINITY,
    gate?: AnswerGate,
  ): Promise<BridgeAnswer> {
    // What this call holds of the gate while its body is read: the body's declared length.
    let reserved = 0;
    const answer = await this.exchange(callback, name, argsText, signal, maxBytes, gate, (bytes) => {
      reserved = bytes;
      gate?.hold(bytes);
    });
    gate?.release(reserved);
    if (!gate || answer.tooLarge) return answer;
    // The answer itself is what stays held until the guest has it.
    gate.hold(answer.text.length);
    return { ok: answer.ok, text: answer.text, held: answer.text.length };
  }

  private async exchange(
    callback: RemoteCallback,
    name: string,
    argsText: string,
    signal: AbortSignal,
    maxBytes: number,
    gate: AnswerGate | undefined,
    reserve: (bytes: number) => void,
  ): Promise<BridgeAnswer> {
    let status: number;
    let body: unknown;
    let kind: string | undefined;
    // JSON doubles a text at most when it escapes it (quotes, backslashes); \u escapes are 6 bytes
    // of a 1-3 byte character: 6 bytes a character bounds any answer of maxBytes characters.
    const maxBody = Number.isFinite(maxBytes) ? 6 * maxBytes + 1024 : Number.POSITIVE_INFINITY;
    try {
      const url = new URL(callback.url);
      const response = await poolFor(url.origin).request({
        path: url.pathname + url.search,
        method: "POST",
        headers: {
          authorization: `Bearer ${callback.grant}`,
          "content-type": "application/json",
          [CALLBACK_ANSWER_HEADER]: "text",
        },
        body: JSON.stringify({ run: callback.run, name, argsText, maxBytes: Number.isFinite(maxBytes) ? maxBytes : undefined }),
        signal: AbortSignal.any([signal, AbortSignal.timeout(CALLBACK_TIMEOUT_MS)]),
      });
      status = response.statusCode;
      // Read when the run's answers on their way to its guest leave room (core/answer-gate.ts):
      // meanwhile the body waits in the connection, not in this process. Reserved as soon as it
      // may be read, with no await between: the turn and the hold are one step.
      for (let turn = gate?.turn(signal); turn; turn = gate?.turn(signal)) {
        await turn;
        if (signal.aborted) break;
      }
      reserve(Math.min(Number(response.headers["content-length"]) || 0, maxBody));
      const text = await readCapped(response.body, maxBody);
      // Longer than any answer within the run's limit: not buffered further, the run ends.
      if (text === undefined) return TOO_LARGE;
      // The answer's kind and text (core/protocol.ts), or JSON from a host that sends that.
      const lineEnd = status === 200 && text[0] !== "{" ? text.indexOf("\n") : -1;
      if (lineEnd > 0 && lineEnd <= MAX_KIND_CHARS) {
        kind = text.slice(0, lineEnd);
        body = text.slice(lineEnd + 1);
      } else {
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
      }
    } catch {
      // The guest learns that the host did not answer, never the address it was called at.
      return failure(new Error(`the host's binding ${name} could not be reached`));
    }
    if (status !== 200) {
      const message = (body as { error?: unknown } | undefined)?.error;
      return failure(new Error(`the host refused the call to ${name}: ${typeof message === "string" ? message : status}`));
    }
    // The answer as its own text (core/protocol.ts), from a host that read the request's header.
    if (kind === "too-large") return TOO_LARGE;
    if (kind === "ok" || kind === "error") return { ok: kind === "ok", text: body as string };
    if (kind !== undefined)
      return failure(new Error(`the host's binding ${name} answered with something that is not a bridge answer`));
    const answer = body as Partial<BridgeAnswer>;
    if (answer?.tooLarge === true) return TOO_LARGE;
    if (typeof answer?.ok !== "boolean" || typeof answer.text !== "string") {
      return failure(new Error(`the host's binding ${name} answered with something that is not a bridge answer`));
    }
    return { ok: answer.ok, text: answer.text };
  }
}

function sameNames(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((name, i) => name === b[i]);
}

function failure(error: Error): BridgeAnswer {
  // Without stacks: the executor's frames and paths never reach a guest.
  return { ok: false, text: bridgeErrorText(error) };
}

/** The longest answer kind ("too-large"): a body whose first line is longer is no answer. */
const MAX_KIND_CHARS = 9;

/** Keep-alive connections per callback origin (a few hosts call one executor); the oldest goes past the cap. */
const pools = new Map<string, Pool>();
function poolFor(origin: string): Pool {
  let pool = pools.get(origin);
  if (!pool) {
    // A guest may hold up to 256 host calls pending (MAX_PENDING_HOST_CALLS): room for a few such runs.
    pool = new Pool(origin, { connections: 1024, keepAliveTimeout: 4_000 });
    pools.set(origin, pool);
    if (pools.size > 64) {
      const [oldest, old] = pools.entries().next().value as [string, Pool];
      pools.delete(oldest);
      void old.close().catch(() => {});
    }
  }
  return pool;
}
