import { AnswerGate } from "../../core/answer-gate.js";
import { type BindingsLike, type BridgeAnswer, peerMaxBytes } from "../../core/bindings.js";
import { MAX_FRAME_BYTES } from "../../core/framing.js";
import type { HostRequest } from "../../core/protocol.js";

/**
 * The host calls a worker process's guests are waiting on, by call id: each is answered by its
 * bindings, and stopped when the worker says its run or call ended (bridge-cancel), when the
 * request it belongs to is answered, or when the worker dies.
 */
export class BridgeCalls {
  /** By call id: what stops it, and the request (or prefix owner) id it belongs to. */
  private readonly calls = new Map<number, { controller: AbortController; id: number }>();
  /**
   * The answers on their way to the worker (core/answer-gate.ts), by request id: a one-off run's,
   * or a prefix's (its calls' host calls name the prepare's id: they share one). Kept while a
   * call of that id is open.
   */
  private readonly gates = new Map<number, { gate: AnswerGate; open: number }>();

  /**
   * Dispatch call `cid` of request `id` to `bindings`; `answer` gets what it returns (never a
   * throw) and calls `delivered` once the worker has read it (or it is dropped). `capChars`: the
   * request's maxBridgeCallBytes, as the host resolved it (not the worker's word).
   */
  start(
    cid: number,
    id: number,
    bindings: BindingsLike,
    call: { fnId: number; argsText: string; maxBytes?: unknown },
    capChars: number,
    answer: (cid: number, answer: BridgeAnswer, delivered: () => void) => void,
  ): void {
    const controller = new AbortController();
    this.calls.set(cid, { controller, id });
    let entry = this.gates.get(id);
    if (!entry) {
      entry = { gate: new AnswerGate(capChars), open: 0 };
      this.gates.set(id, entry);
    }
    entry.open++;
    const { gate } = entry;
    void bindings
      .dispatch(call.fnId, call.argsText, controller.signal, peerMaxBytes(call.maxBytes), gate)
      .catch((): BridgeAnswer => ({ ok: false, text: '{"$":"e","n":"Error","m":"the host function failed"}' }))
      .then((result) => {
        this.calls.delete(cid);
        let released = false;
        answer(cid, result, () => {
          if (released) return;
          released = true;
          gate.release(result.held ?? 0);
          if (--(entry as { open: number }).open === 0 && this.gates.get(id) === entry) this.gates.delete(id);
        });
      });
  }

  cancel(cid: number): void {
    this.calls.get(cid)?.controller.abort();
  }

  /** Request `id` was answered: a one-off run's host calls end with it, whatever the worker says. */
  endFor(id: number): void {
    for (const call of this.calls.values()) if (call.id === id) call.controller.abort();
  }

  endAll(): void {
    for (const call of this.calls.values()) call.controller.abort();
    this.calls.clear();
  }
}

/**
 * Send a host call's answer. One larger than a frame carries (64 MiB) threw in encodeTextFrame, an
 * unhandled rejection that ended the host process (a host function returning 70 MB did): the
 * guest gets a catchable error instead.
 */
export function sendBridgeAnswer(send: (message: HostRequest) => void, cid: number, { ok, text, tooLarge }: BridgeAnswer): void {
  try {
    send(tooLarge ? { t: "bridge-result", cid, ok: false, text: "", tooLarge } : { t: "bridge-result", cid, ok, text });
  } catch {
    const message = `ERR_BRIDGE_PAYLOAD_TOO_LARGE: the host function's answer (${text.length} characters encoded) is larger than a worker's pipe carries (${MAX_FRAME_BYTES} bytes)`;
    send({ t: "bridge-result", cid, ok: false, text: JSON.stringify({ $: "e", n: "RangeError", m: message }) });
  }
}
