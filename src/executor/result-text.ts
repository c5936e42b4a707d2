import { sharedCodec } from "../core/bindings.js";
import { readBodies } from "../core/fetch-wire.js";
import type { RunResult } from "../core/types.js";

/** The RunResult as codec text (the format is described in app.ts). Request/Response bodies are read first: the codec is synchronous. */
export async function encodeResult(result: RunResult): Promise<string> {
  const codec = sharedCodec();
  try {
    if (result.ok) await readBodies([result.value, result.exports]);
    return codec.encode(withoutUndefinedFields(result), "result");
  } catch (error) {
    const failed: RunResult = {
      status: "failed",
      ok: false,
      error: { code: "ERR_NOT_SERIALIZABLE", name: "TypeError", message: (error as Error).message },
      logs: result.logs,
      stats: result.stats,
    };
    return codec.encode(withoutUndefinedFields(failed), "result");
  }
}

/**
 * The envelope's optional fields (`stats.heapUsedBytes`, `error.stack`, …) are left out when
 * undefined rather than sent as `{"$":"u"}`, so a plain JSON client sees plain stats. The guest's
 * own values (`value`, `exports`, `error.fields`) are untouched: there undefined is data.
 */
function withoutUndefinedFields(result: RunResult): RunResult {
  const stats = dropUndefined(result.stats);
  if (result.ok) return { ...result, stats };
  return { ...result, error: dropUndefined(result.error), stats } as RunResult;
}

function dropUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}
