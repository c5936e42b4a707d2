import type { IncomingMessage } from "node:http";
import { ServiceError } from "./errors.js";
import { scanJson } from "./json-scan.js";

/**
 * Read a request body, counting bytes AS THEY ARRIVE: past `capBytes` the reading stops and a
 * 413 is thrown at once, so a client cannot make the service buffer more than the cap whatever
 * it sends (no Content-Length, chunked, or a lying length). A declared Content-Length over the
 * cap is refused before a byte is read.
 *
 * On a refusal the stream is paused and its listeners removed; the caller answers with
 * `connection: close`, and the connection closes after a bounded linger (src/executor/linger.ts),
 * the rest of the upload discarded, never kept.
 */
export function readCappedBody(incoming: IncomingMessage, capBytes: number, budget: BodyBudget): Promise<Buffer> {
  const declared = incoming.headers["content-length"];
  if (declared !== undefined && Number(declared) > capBytes) return Promise.reject(tooLarge(capBytes));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    const refuse = (error: ServiceError) => {
      stop();
      incoming.pause();
      chunks.length = 0;
      budget.give(received);
      reject(error);
    };
    const stop = () => {
      incoming.off("data", onData);
      incoming.off("end", onEnd);
      incoming.off("error", onError);
      incoming.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      if (received + chunk.length > capBytes) return refuse(tooLarge(capBytes));
      if (!budget.take(chunk.length)) {
        return refuse(
          new ServiceError(
            "ERR_CAPACITY",
            `the executor holds ${budget.bytes} bytes of request bodies being uploaded, its limit; retry later`,
          ),
        );
      }
      received += chunk.length;
      chunks.push(chunk);
    };
    const onEnd = () => {
      stop();
      resolve(Buffer.concat(chunks, received));
    };
    const onError = () => refuse(new ServiceError("ERR_BAD_REQUEST", "the request body could not be read"));
    // `close` before `end`: the client went away mid-upload.
    const onClose = () => {
      if (!incoming.complete) onError();
    };
    incoming.on("data", onData);
    incoming.on("end", onEnd);
    incoming.on("error", onError);
    incoming.on("close", onClose);
  });
}

/**
 * The bytes of request bodies held at once, across every connection: without it, each admitted
 * upload could hold up to the body cap, so a client with the secret and many connections made the
 * service buffer connections × cap (30 uploads of 30 MB: 962 MB, on its way to the OOM killer).
 * An upload that would pass it is refused with ERR_CAPACITY (503). A body read whole is given
 * back when its response ends.
 */
export class BodyBudget {
  private used = 0;

  constructor(readonly bytes: number) {}

  take(n: number): boolean {
    if (this.used + n > this.bytes) return false;
    this.used += n;
    return true;
  }

  give(n: number): void {
    this.used -= n;
  }
}

/**
 * The body as UTF-8 JSON, or a 400 saying it must be `what`. The refusal never quotes the body:
 * JSON.parse's message would, and logs must never see a caller's text. A body of more values or
 * object members than `bounds` allows (more than any valid request holds) is refused before
 * JSON.parse builds it: the parse runs on the service's thread, where a million keys held every
 * other request for seconds.
 */
export function parseJsonBody(body: Buffer, what: string, bounds: { values: number; members?: number }): unknown {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  } catch {
    throw notJson(what);
  }
  const scanned = scanJson(text, bounds);
  if (scanned === undefined) throw notJson(what);
  if (scanned === "excess") {
    const members = bounds.members === undefined ? "" : ` or ${bounds.members} object members`;
    throw new ServiceError(
      "ERR_BAD_REQUEST",
      `the body holds more than ${bounds.values} JSON values${members}: no valid request does`,
    );
  }
  return JSON.parse(text);
}

function notJson(what: string): ServiceError {
  return new ServiceError("ERR_BAD_REQUEST", `the body must be UTF-8 JSON: ${what}`);
}

function tooLarge(capBytes: number): ServiceError {
  return new ServiceError(
    "ERR_BODY_TOO_LARGE",
    `the request body is larger than the limit of ${capBytes} bytes (executor option maxBodyMb, cordon serve --max-body-mb)`,
  );
}
