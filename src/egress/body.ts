import { EgressError } from "./errors.js";

/**
 * Read a request body into memory, refusing it once it passes `maxBytes`. Buffered so its size is
 * known before any connection exists, and so a 307/308 redirect can send it again.
 */
export async function readRequestBody(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
  signal: AbortSignal,
): Promise<Uint8Array | null> {
  if (body === null) return null;
  const reader = body.getReader();
  const onAbort = () => void reader.cancel(signal.reason).catch(() => {});
  signal.addEventListener("abort", onAbort, { once: true });
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (signal.aborted) throw signal.reason;
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        await reader.cancel().catch(() => {});
        throw new EgressError("request-too-large", `the request body is larger than maxRequestBytes (${maxBytes} bytes)`);
      }
      chunks.push(value);
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

/**
 * Pass a response body through while counting it. Past `maxBytes` (decoded bytes, so a small
 * compressed body cannot expand past the cap) the upstream read is cancelled, which closes the
 * connection, and the caller's stream errors with an EgressError. `settle` runs exactly once,
 * when the body ends, fails or is cancelled.
 */
export function cappedBody(
  source: ReadableStream<Uint8Array>,
  maxBytes: number,
  settle: (error?: unknown) => void,
): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  let total = 0;
  let settled = false;
  const finish = (error?: unknown) => {
    if (settled) return;
    settled = true;
    settle(error);
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (error) {
          controller.error(error);
          finish(error);
          return;
        }
        if (chunk.done) {
          controller.close();
          finish();
          return;
        }
        total += chunk.value.byteLength;
        if (total > maxBytes) {
          const error = new EgressError(
            "response-too-large",
            `the response body is larger than maxResponseBytes (${maxBytes} bytes)`,
          );
          controller.error(error);
          finish(error);
          await reader.cancel(error).catch(() => {});
          return;
        }
        controller.enqueue(chunk.value);
      },
      async cancel(reason) {
        finish(reason ?? new Error("cancelled"));
        await reader.cancel(reason).catch(() => {});
      },
    },
    // Pull only when the caller reads: nothing is buffered ahead of what the caller consumed.
    { highWaterMark: 0 },
  );
}
