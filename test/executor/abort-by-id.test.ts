import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sharedCodec } from "../../src/core/bindings.js";
import { DEFAULT_LIMITS } from "../../src/core/limits.js";
import { CLIENT_HEADER, type RemoteRequest } from "../../src/core/protocol.js";
import type { RunResult } from "../../src/core/types.js";
import { ABORT_ANSWER_MS, ExecutorClient } from "../../src/hosts/remote/client.js";
import { hostRunBody, refusal, SECRET, startExecutor, type TestExecutor } from "./helpers.js";

/**
 * A remote run with an `abortId` is aborted by an `abort` request naming it, and answered on its
 * own request, with the lines its guest logged (test/conformance/log-lines.test.ts runs that end
 * to end on the remote host). Here: who may abort what, and what the client does when the
 * executor does not answer the abort.
 */
describe("POST /host, abort by id", () => {
  let service: TestExecutor;
  beforeAll(async () => {
    service = await startExecutor();
  });
  afterAll(async () => {
    await service.executor.close({ graceMs: 0 });
  });

  function post(body: unknown, client: string): Promise<Response> {
    const headers = { "content-type": "application/json", authorization: `Bearer ${SECRET}`, [CLIENT_HEADER]: client };
    return fetch(`${service.url}/host`, { method: "POST", headers, body: JSON.stringify(body) });
  }

  async function spinningRun(client: string, abortId: string, wallTimeMs: number): Promise<RunResult> {
    const body = { ...(await hostRunBody("console.log('spinning'); for (;;) {}")), abortable: true, abortId };
    const response = await post({ ...body, limits: { ...DEFAULT_LIMITS, wallTimeMs, cpuTimeMs: wallTimeMs } }, client);
    expect(response.status).toBe(200);
    return sharedCodec().decode(await response.text()) as RunResult;
  }

  /** Send `abort` every 50 ms until `run` is answered. */
  async function abortUntil(run: Promise<RunResult>, abort: { client: string; abortId: string }) {
    let answered = false;
    void run.finally(() => {
      answered = true;
    });
    while (!answered) {
      const response = await post({ engine: "v8", t: "abort", abortId: abort.abortId, reason: "stop it" }, abort.client);
      // Answered alike whether or not the run exists: nothing is learned from it about other clients' runs.
      expect(response.status).toBe(204);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return run;
  }

  it("aborts only the run its own client names: another client's abort with the same id does nothing", async () => {
    const victim = spinningRun("client-a", "run-1", 1500);
    const result = await abortUntil(victim, { client: "client-b", abortId: "run-1" });
    // Ended by its limits (CPU and wall time are equal: either may fire first), never aborted.
    expect(["ERR_WALL_TIMEOUT", "ERR_CPU_TIMEOUT"]).toContain(result.ok ? "completed" : result.error.code);

    const mine = await abortUntil(spinningRun("client-a", "run-2", 20_000), { client: "client-a", abortId: "run-2" });
    expect(mine.status).toBe("aborted");
    expect(mine.ok ? undefined : mine.error.code).toBe("ERR_ABORTED");
    expect(mine.status === "aborted" ? mine.reason : undefined).toBe("stop it");
    expect(mine.stats.wallMs).toBeLessThan(15_000);
  }, 30_000);

  it("drops a run waiting for a slot, and its answer gives the caller's reason", async () => {
    const busy = await startExecutor({ sandbox: { maxConcurrentRuns: 1 } });
    const client = new ExecutorClient(busy.url, SECRET);
    try {
      const spin = await hostRunBody("for (;;) {}");
      const holder = client.send({ ...spin, engine: "v8", t: "run", limits: { ...DEFAULT_LIMITS, wallTimeMs: 3000 } }, 3000);
      // Until the holder runs (a run answers only after it), a probe without a signal would queue too.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const controller = new AbortController();
      const queued = client.send({ ...spin, engine: "v8", t: "run", abortable: true, abortId: "q1" }, 30_000, controller.signal);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const started = performance.now();
      controller.abort(new Error("not needed any more"));
      const answer = await queued;
      expect("result" in answer ? answer.result : answer).toMatchObject({
        status: "aborted",
        reason: "not needed any more",
        error: { code: "ERR_ABORTED", message: "the run was aborted: not needed any more" },
      });
      // Answered by the executor (not after the client's ABORT_ANSWER_MS), while the holder still runs.
      expect(performance.now() - started).toBeLessThan(ABORT_ANSWER_MS - 100);
      const held = await holder;
      expect("result" in held && !held.result.ok ? held.result.error.code : held).toBe("ERR_WALL_TIMEOUT");
    } finally {
      await client.close();
      await busy.executor.close({ graceMs: 0 });
    }
  }, 30_000);

  it("remembers an abort that came before its run: the run is answered aborted at once, and only that run", async () => {
    const quick = async (client: string, abortId: string) => {
      const response = await post({ ...(await hostRunBody("export default 7")), abortable: true, abortId }, client);
      return sharedCodec().decode(await response.text()) as RunResult;
    };
    expect((await post({ engine: "v8", t: "abort", abortId: "early-1", reason: "overtaken" }, "client-a")).status).toBe(204);
    const started = performance.now();
    const overtaken = await spinningRun("client-a", "early-1", 20_000);
    expect(overtaken).toMatchObject({ status: "aborted", reason: "overtaken", error: { code: "ERR_ABORTED" } });
    // It never started: nothing logged, and not the spin's 20 s.
    expect(overtaken.logs).toEqual([]);
    expect(performance.now() - started).toBeLessThan(10_000);
    // Taken by that run: the id aborts nothing after it.
    expect(await quick("client-a", "early-1")).toMatchObject({ ok: true, value: 7 });
    // Another client's early abort is no abort of this client's run with the same id.
    await post({ engine: "v8", t: "abort", abortId: "early-2", reason: "not yours" }, "client-b");
    expect(await quick("client-a", "early-2")).toMatchObject({ ok: true, value: 7 });
  }, 30_000);

  it("refuses malformed abort requests, naming the field", async () => {
    const cases: [unknown, RegExp][] = [
      [{ engine: "v8", t: "abort", abortId: "../x", reason: "r" }, /abortId/],
      [{ engine: "v8", t: "abort", abortId: "a".repeat(65), reason: "r" }, /abortId/],
      [{ engine: "v8", t: "abort", abortId: "a", reason: "r".repeat(4097) }, /reason/],
      [{ engine: "v8", t: "abort", abortId: "a" }, /reason/],
      [{ engine: "v8", t: "abort", abortId: "a", reason: "r", extra: 1 }, /extra|Unrecognized/i],
      [{ ...(await hostRunBody("export default 1")), abortId: "white space" }, /abortId/],
    ];
    for (const [body, field] of cases) {
      const refused = await refusal(await post(body, "client-a"));
      expect(refused.code, JSON.stringify(body).slice(0, 200)).toBe("ERR_BAD_REQUEST");
      expect(refused.message).toMatch(field);
    }
  });
});

describe("the remote client's aborts with every run connection busy", () => {
  it("go on connections of their own: the run holding the only one comes back with its logs, the one queued behind it at once", async () => {
    const service = await startExecutor();
    const client = new ExecutorClient(service.url, SECRET, 1);
    try {
      // A worker up and the connection open before the timed part.
      const warm = await client.send({ ...(await hostRunBody("export default 1")), engine: "v8", t: "run" }, 30_000);
      expect("result" in warm && warm.result.ok).toBe(true);
      const spin = await hostRunBody("for (let i = 0; ; i++) if (i % 1e8 === 0) console.log('spinning')");
      const limits = { ...DEFAULT_LIMITS, wallTimeMs: 20_000, cpuTimeMs: 20_000 };
      const run = (abortId: string, signal: AbortSignal) =>
        client.send({ ...spin, engine: "v8", t: "run", limits, abortable: true, abortId }, 20_000, signal);
      const [first, second] = [new AbortController(), new AbortController()];
      const holding = run("holding", first.signal);
      // Waits in the client for the only connection.
      const queued = run("queued", second.signal);
      // The holding run has started (its request is being answered) and logged.
      for (let i = 0; i < 200; i++) {
        const health = (await (await fetch(`${service.url}/health`)).json()) as { load: { activeRuns: number } };
        if (health.load.activeRuns > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const started = performance.now();
      second.abort("not sent yet");
      first.abort("enough");
      const [held, waited] = await Promise.all([holding, queued]);
      // Both well before ABORT_ANSWER_MS, when the client would close them with nothing: the
      // aborts did not wait behind the run holding the connection.
      expect(performance.now() - started).toBeLessThan(ABORT_ANSWER_MS - 100);
      const heldResult = "result" in held ? held.result : undefined;
      expect(heldResult).toMatchObject({ status: "aborted", reason: "enough" });
      expect(heldResult?.logs.length).toBeGreaterThan(0);
      expect(new Set(heldResult?.logs.map((line) => line.message))).toEqual(new Set(["spinning"]));
      // Its abort reached the executor before it did, and was kept for it.
      expect("result" in waited ? waited.result : waited).toMatchObject({ status: "aborted", reason: "not sent yet", logs: [] });
    } finally {
      await client.close();
      await service.executor.close({ graceMs: 0 });
    }
  }, 60_000);
});

describe("the remote client's abort when the executor does not answer it", () => {
  /** An HTTP server on 127.0.0.1 that never answers runs and answers aborts with `abortStatus`. */
  async function fakeExecutor(abortStatus: number) {
    const seen = { requests: 0, aborts: [] as unknown[], runClosed: false };
    const server: Server = createServer((request: IncomingMessage, response) => {
      seen.requests++;
      let body = "";
      request.on("data", (chunk) => {
        body += chunk;
      });
      request.on("end", () => {
        const message = JSON.parse(body) as RemoteRequest;
        if (message.t === "abort") {
          seen.aborts.push(message);
          response.statusCode = abortStatus;
          response.end(abortStatus === 204 ? undefined : '{"error":{"code":"ERR_BAD_REQUEST","message":"t"}}');
          return;
        }
        // Never answered; its connection closing is the run's abort there.
        response.on("close", () => {
          seen.runClosed = true;
        });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const close = () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      });
    return { url, seen, close };
  }

  async function abortedRun(abortStatus: number) {
    const executor = await fakeExecutor(abortStatus);
    const client = new ExecutorClient(executor.url, SECRET);
    try {
      const request: RemoteRequest = {
        ...(await hostRunBody("for (;;) {}")),
        engine: "v8",
        t: "run",
        abortable: true,
        abortId: "r1",
      };
      const controller = new AbortController();
      const answer = client.send(request, 30_000, controller.signal);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const started = performance.now();
      controller.abort("enough");
      const result = await answer;
      const waitedMs = performance.now() - started;
      for (let i = 0; i < 100 && !executor.seen.runClosed; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      return { result: "result" in result ? result.result : undefined, waitedMs, seen: executor.seen };
    } finally {
      await client.close();
      await executor.close();
    }
  }

  it("closes the run's request once ABORT_ANSWER_MS has passed without the run's answer", async () => {
    const { result, waitedMs, seen } = await abortedRun(204);
    expect(seen.aborts).toEqual([{ engine: "v8", t: "abort", abortId: "r1", reason: "enough" }]);
    expect(result).toMatchObject({ status: "aborted", reason: "enough", error: { code: "ERR_ABORTED" }, logs: [] });
    expect(waitedMs).toBeGreaterThanOrEqual(ABORT_ANSWER_MS - 50);
    expect(waitedMs).toBeLessThan(ABORT_ANSWER_MS + 5000);
    expect(seen.runClosed).toBe(true);
  }, 20_000);

  it("closes it at once when the executor refuses the abort (one that predates abort requests)", async () => {
    const { result, waitedMs, seen } = await abortedRun(400);
    expect(seen.aborts).toHaveLength(1);
    expect(result).toMatchObject({ status: "aborted", reason: "enough", error: { code: "ERR_ABORTED" } });
    // Not the ABORT_ANSWER_MS wait: the refusal closes it (a loopback round trip, a few ms).
    expect(waitedMs).toBeLessThan(ABORT_ANSWER_MS - 100);
    expect(seen.runClosed).toBe(true);
  }, 20_000);

  it("sends nothing for a signal aborted before the run", async () => {
    const executor = await fakeExecutor(204);
    const client = new ExecutorClient(executor.url, SECRET);
    try {
      const request: RemoteRequest = { ...(await hostRunBody("1")), engine: "v8", t: "run", abortable: true, abortId: "r2" };
      const answer = await client.send(request, 30_000, AbortSignal.abort("early"));
      expect(answer).toMatchObject({ result: { status: "aborted", reason: "early" } });
      expect(executor.seen.requests).toBe(0);
    } finally {
      await client.close();
      await executor.close();
    }
  });
});
