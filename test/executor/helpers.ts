import { pino } from "pino";
import { sharedCodec } from "../../src/core/bindings.js";
import { DEFAULT_LIMITS } from "../../src/core/limits.js";
import { normalizeSource } from "../../src/core/source.js";
import type { RunResult } from "../../src/core/types.js";
import { descendants } from "../helpers/processes.js";
import { createExecutor, type Executor, type ExecutorOptions } from "../../src/executor/server.js";

/** A fixed test secret of 48 bytes: over the 32-byte minimum. */
export const SECRET = "cordon-test-secret-0123456789abcdefghijklmnopqrs";

export interface TestExecutor {
  executor: Executor;
  url: string;
  /** Every service log line, parsed. */
  logs: Record<string, unknown>[];
  /** The raw log text, to assert what never appears in it. */
  logText: () => string;
  /** POST /run with the right secret (unless `secret` says otherwise); `signal` ends the request. */
  run: (body: unknown, init?: { secret?: string | null }, signal?: AbortSignal) => Promise<Response>;
  /** POST /run and decode the RunResult with cordon's codec. */
  runResult: (body: unknown) => Promise<RunResult>;
}

/** A real executor on 127.0.0.1, a free port, the process host; its log captured in memory. */
export async function startExecutor(options: ExecutorOptions = {}): Promise<TestExecutor> {
  const lines: string[] = [];
  const logger = pino({}, { write: (line: string) => void lines.push(line) });
  const executor = await createExecutor({ secret: SECRET, host: "127.0.0.1", port: 0, logger, ...options });
  const run = (body: unknown, init: { secret?: string | null } = {}, signal?: AbortSignal) => {
    const secret = init.secret === undefined ? SECRET : init.secret;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (secret !== null) headers.authorization = `Bearer ${secret}`;
    return fetch(`${executor.url}/run`, {
      method: "POST",
      headers,
      body: typeof body === "string" ? body : JSON.stringify(body),
      signal,
    });
  };
  return {
    executor,
    url: executor.url,
    get logs() {
      return lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    },
    logText: () => lines.join(""),
    run,
    runResult: async (body) => {
      const response = await run(body);
      if (response.status !== 200) throw new Error(`expected 200, got ${response.status}: ${await response.text()}`);
      return sharedCodec().decode(await response.text()) as RunResult;
    },
  };
}

/** The error body of a refusal. */
/** The body of a `/host` run of `code` as the remote host sends it: no bindings, no input, default limits. */
export async function hostRunBody(code: string) {
  return {
    engine: "v8",
    t: "run",
    source: await normalizeSource(code, "<guest>"),
    sourceImports: {},
    bindingsText: JSON.stringify({ globals: {}, modules: {} }),
    inputText: "null",
    limits: DEFAULT_LIMITS,
  };
}

export async function refusal(response: Response): Promise<{ status: number; code: string; message: string }> {
  const body = (await response.json()) as { error: { code: string; message: string } };
  return { status: response.status, code: body.error.code, message: body.error.message };
}

/**
 * The pids under `pid` (Linux /proc): the process host's workers, the spawner process that
 * starts most of them (their parent), and cordon's esbuild service.
 */
export function childPids(pid: number): number[] {
  return descendants(pid).map((each) => each.pid);
}

/** Running, that is: neither gone nor a zombie (test/helpers/processes.ts). */
export { running as alive } from "../helpers/processes.js";
