import { request as httpRequest } from "node:http";
import { sharedCodec } from "../../src/core/bindings.js";
import { DEFAULT_LIMITS } from "../../src/core/limits.js";
import { normalizeSource } from "../../src/core/source.js";
import type { RunResult } from "../../src/core/types.js";
import { SECRET } from "./helpers.js";

/** Raw `POST /host` requests (prepare, prefix-call) as the remote host sends them, from a chosen address. */

/** POST /host from `from` (a loopback address: 127.0.0.2 is another client than 127.0.0.1). */
export function post(url: string, body: unknown, from = "127.0.0.1"): Promise<{ status: number; prefix?: string; text: string }> {
  return new Promise((resolve, reject) => {
    const target = new URL(`${url}/host`);
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: "POST",
        localAddress: from,
        headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
      },
      (res) => {
        let text = "";
        res.on("data", (chunk) => {
          text += chunk;
        });
        res.on("end", () => {
          const prefix = res.headers["cordon-prefix"];
          resolve({ status: res.statusCode ?? 0, prefix: typeof prefix === "string" ? prefix : undefined, text });
        });
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

export const CODE = "export async function wait(ms) { await new Promise((r) => setTimeout(r, ms)); return ms }";

/** The `/host` body that prepares `code` (v8, no imports, no bindings), as a remote host sends it. */
export async function prepareBody(code: string) {
  const source = await normalizeSource(code, "<guest>");
  return {
    engine: "v8",
    t: "prepare",
    key: "k",
    source,
    sourceImports: {},
    bindingsText: '{"globals":{},"modules":{}}',
    limits: DEFAULT_LIMITS,
  };
}

export async function prepare(url: string, from?: string, code = CODE) {
  const answer = await post(url, await prepareBody(code), from);
  return { ...answer, result: sharedCodec().decode(answer.text) as RunResult };
}

export function call(url: string, prefix: string | undefined, ms: number, from?: string) {
  const argsText = sharedCodec().encode([ms]);
  return post(url, { engine: "v8", t: "prefix-call", prefix, path: "wait", argsText, limits: DEFAULT_LIMITS }, from);
}

/**
 * Until `GET /health` counts `busy` prefixes in use (at most 5 s): a call is in progress by then,
 * where a fixed sleep after sending it guessed (a loaded machine can start it late).
 */
export async function untilBusy(url: string, busy: number): Promise<void> {
  const end = performance.now() + 5000;
  for (;;) {
    const health = (await (await fetch(`${url}/health`)).json()) as { prefixes: { busy: number } };
    if (health.prefixes.busy >= busy) return;
    if (performance.now() > end) throw new Error(`/health never counted ${busy} busy prefixes (last: ${health.prefixes.busy})`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
