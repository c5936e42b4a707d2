import { randomUUID } from "node:crypto";
import { setMaxListeners } from "node:events";
import { AnswerGate } from "../../core/answer-gate.js";
import { type BindingsLike, type BridgeAnswer, peerMaxBytes } from "../../core/bindings.js";
import { DEFAULT_LIMITS } from "../../core/limits.js";
import { CALLBACK_ANSWER_HEADER, type CallbackAnswerKind } from "../../core/protocol.js";
import { readCapped } from "../../core/read-capped.js";
import { whenAborted } from "../../core/when-aborted.js";
import { checkGrant, checkGrantKey, GrantError, type GrantPayload, signGrant, verifyGrant } from "./grant.js";

/** A run's bindings, as the host registers them for an executor to call back. */
interface Registered {
  bindings: BindingsLike;
  /** Binding name → function id in `bindings`. */
  names: Map<string, number>;
  expires: number;
  subject: string;
  /** Aborted when the run is unregistered, or a prefix's last request in flight ends: its host calls stop. */
  ended: AbortController;
  /** A prefix's registration (renewed per request): callbacks only while a request is open. */
  scoped: boolean;
  /** Requests of a scoped registration in flight (renew opens one, close ends it). */
  open: number;
  /** Its answers on their way to the executor (core/answer-gate.ts), made at the first callback. */
  answers?: AnswerGate;
}

/**
 * Where the handler's answer is written, when it can tell (the `env` @hono/node-server passes a
 * handler: `{ incoming, outgoing }`): an answer holds the run's gate until its response closes.
 */
export interface RpcEnv {
  outgoing?: { once(event: "close", listener: () => void): unknown };
}

/** Is this registration answering callbacks now: not expired, and (scoped) with a request open. */
function isOpen(registered: Registered | undefined): registered is Registered {
  return registered !== undefined && registered.expires > Date.now() && !(registered.scoped && registered.open === 0);
}

export interface RpcHandler {
  /** Register a run's bindings; returns its id and the grant the executor presents. */
  register(
    bindings: BindingsLike,
    names: Map<string, number>,
    options: { subject: string; ttlMs: number; scoped?: boolean },
  ): { run: string; grant: string; unregister(): void };
  /**
   * A fresh grant for a registered run, valid `ttlMs` from now, and the registration kept that
   * long: a prefix gets one per call, so each grant stays short-lived while the prefix lives on.
   * Undefined when the run is not (or no longer) registered.
   */
  renew(run: string, ttlMs: number): string | undefined;
  /**
   * The request a `renew` was for has ended. A prefix's registration (`scoped`) answers callbacks
   * only while one of its requests is open, and stops the host calls of the ended ones when none is.
   */
  close(run: string): void;
  /**
   * Answer one callback: POST `{ run, name, argsText }` with `authorization: Bearer <grant>`.
   * Pass `env` where your server gives the Node response (hono on @hono/node-server: `c.env`):
   * a run's long answers then wait for earlier ones to be sent, not only encoded.
   */
  handle(request: Request, env?: RpcEnv): Promise<Response>;
}

/** The largest call body the handler reads, in MiB. */
export const MAX_CALL_BODY_MB = 64;
const MAX_BODY = MAX_CALL_BODY_MB * 1024 * 1024;

function answer(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

/** An answer as its kind, a line feed and its text (core/protocol.ts, CALLBACK_ANSWER_HEADER). */
function textAnswer(result: BridgeAnswer): Response {
  const kind: CallbackAnswerKind = result.tooLarge ? "too-large" : result.ok ? "ok" : "error";
  return new Response(`${kind}\n${result.tooLarge ? "" : result.text}`, {
    status: 200,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}

/**
 * The host's side of bindings over the wire: mount `handle` in your own app (`createRpcHandler`),
 * or let cordon's callback server do it. It verifies the grant's signature, expiry and run id,
 * and dispatches only names granted to that run; everything else is refused without a call.
 */
export function createRpcHandler(options: { key: Uint8Array | string }): RpcHandler {
  const key = checkGrantKey(options.key);
  const runs = new Map<string, Registered>();

  return {
    register(bindings, names, { subject, ttlMs, scoped = false }) {
      const run = randomUUID();
      const expires = Date.now() + ttlMs;
      const ended = new AbortController();
      // Each of the run's callbacks in flight listens on it: not a leak.
      setMaxListeners(0, ended.signal);
      const registered: Registered = { bindings, names, expires, subject, ended, scoped, open: 0 };
      runs.set(run, registered);
      const grant = signGrant(key, { run, sub: subject, names: [...names.keys()], exp: expires });
      return {
        run,
        grant,
        unregister: () => {
          runs.delete(run);
          registered.ended.abort();
        },
      };
    },

    close(run) {
      const registered = runs.get(run);
      if (!registered || registered.open === 0) return;
      registered.open--;
      if (registered.open > 0 || !registered.scoped) return;
      // No request of the prefix is in flight: what its ended requests still do stops.
      registered.ended.abort();
      registered.ended = new AbortController();
      setMaxListeners(0, registered.ended.signal);
    },

    renew(run, ttlMs) {
      const registered = runs.get(run);
      if (!registered) return undefined;
      registered.open++;
      registered.expires = Math.max(registered.expires, Date.now() + ttlMs);
      return signGrant(key, { run, sub: registered.subject, names: [...registered.names.keys()], exp: Date.now() + ttlMs });
    },

    async handle(request, env) {
      if (request.method !== "POST") return answer(405, { error: "POST only" });
      const auth = request.headers.get("authorization") ?? "";
      if (!auth.startsWith("Bearer ")) return answer(401, { error: "a grant is required" });
      // The grant's signature and expiry, and that its run is open, before any of the body is
      // read: anyone who can reach this server could otherwise make it buffer and parse 64 MB.
      let granted: GrantPayload;
      try {
        granted = verifyGrant(key, auth.slice("Bearer ".length), {});
      } catch (error) {
        if (error instanceof GrantError) return answer(401, { error: error.message });
        throw error;
      }
      if (!isOpen(runs.get(granted.run))) return answer(404, { error: "the run is over" });
      const length = Number(request.headers.get("content-length") ?? 0);
      if (length > MAX_BODY) return answer(413, { error: "the call is too large" });
      let call: { run?: unknown; name?: unknown; argsText?: unknown; maxBytes?: unknown };
      try {
        const text = request.body ? await readCapped(request.body, MAX_BODY) : "";
        if (text === undefined) return answer(413, { error: "the call is too large" });
        call = JSON.parse(text) as typeof call;
      } catch {
        return answer(400, { error: "the body is not JSON" });
      }
      if (typeof call?.run !== "string" || typeof call.name !== "string" || typeof call.argsText !== "string") {
        return answer(400, { error: "the body must be { run, name, argsText }" });
      }
      try {
        // Verified above; what the body names is checked against it now (and the expiry again).
        checkGrant(granted, { run: call.run, name: call.name });
      } catch (error) {
        if (error instanceof GrantError) return answer(error.reason === "name" ? 403 : 401, { error: error.message });
        throw error;
      }
      // The run may have ended while the body was read.
      const registered = runs.get(call.run);
      if (!isOpen(registered)) return answer(404, { error: "the run is over" });
      const fnId = registered.names.get(call.name);
      if (fnId === undefined) return answer(403, { error: "the name is not bound for this run" });
      // The executor aborts its request when the run or call ended, and a run's calls end when the
      // host unregisters it (its result arrived): the binding's work (a fetch) stops too.
      const stop = new AbortController();
      const detach = whenAborted([request.signal, registered.ended.signal], () => stop.abort());
      const maxBytes = peerMaxBytes(call.maxBytes);
      // Capped by the run's maxBridgeCallBytes as the executor resolved it (it holds the run's limits).
      registered.answers ??= new AnswerGate(maxBytes ?? DEFAULT_LIMITS.maxBridgeCallBytes);
      const gate = registered.answers;
      let held = 0;
      try {
        const result = await registered.bindings.dispatch(fnId, call.argsText, stop.signal, maxBytes, gate);
        held = result.held ?? 0;
        if (request.headers.get(CALLBACK_ANSWER_HEADER) === "text") return textAnswer(result);
        return answer(200, { ok: result.ok, text: result.text, tooLarge: result.tooLarge });
      } finally {
        detach();
        // Released once the response is sent (closed) where the server says so; else now: the
        // gate then bounds how many answers are encoded at once, not how many are being sent.
        const release = () => gate.release(held);
        if (held > 0 && env?.outgoing) env.outgoing.once("close", release);
        else release();
      }
    },
  };
}
