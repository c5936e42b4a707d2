import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { sharedCodec } from "../../src/core/bindings.js";
import type { RemoteRequest } from "../../src/core/protocol.js";
import { createExecutor, type Executor } from "../../src/executor/server.js";
import { createRpcHandler, createSandbox } from "../../src/index.js";

const SECRET = "cordon-remote-host-test-secret-0123456789abcdef";
const codec = sharedCodec();
const cleanup: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

async function executor(options: { port?: number } = {}): Promise<Executor> {
  const started = await createExecutor({ secret: SECRET, host: "127.0.0.1", port: options.port ?? 0, logger: false });
  cleanup.push(() => started.close({ graceMs: 0 }));
  return started;
}

/** A real HTTP server on 127.0.0.1 playing a hostile (or broken) executor. */
async function fakeExecutor(handler: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<string> {
  const server: Server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => {
      body += chunk;
    });
    req.on("end", () => handler(req, body, res));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function okResultText(value: unknown): string {
  return codec.encode({
    status: "completed",
    ok: true,
    value,
    exports: {},
    skippedExports: [],
    logs: [],
    stats: { engine: "v8", host: "process", wallMs: 1, cpuMs: 1, bridgeCalls: 0, warm: false },
  });
}

async function callBack(callback: NonNullable<RemoteRequest["callback"]>, grant: string, body: Record<string, unknown>) {
  const response = await fetch(callback.url, {
    method: "POST",
    headers: { authorization: `Bearer ${grant}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

describe("the remote host against a real executor", () => {
  it("runs with host functions, host imports, logs and codec values over the wire", async () => {
    const service = await executor();
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    const seen: unknown[] = [];
    const result = await sandbox.run({
      code: `import { tag } from "tags";
        export default async (input) => { console.log("start"); return { user: await lookup(input.id), tag: await tag("x"), when: new Date(0), big: 2n ** 70n } }`,
      input: { id: 7 },
      globals: {
        lookup: async (id: number) => {
          seen.push(id);
          return { id, name: "ada" };
        },
      },
      imports: { tags: { tag: async (s: string) => `#${s}` } },
    });
    expect(result.ok, JSON.stringify(result.ok ? null : result.error)).toBe(true);
    if (!result.ok) return;
    expect(result.value).toEqual({ user: { id: 7, name: "ada" }, tag: "#x", when: new Date(0), big: 2n ** 70n });
    expect(seen).toEqual([7]);
    expect(result.logs.map((l) => l.message)).toEqual(["start"]);
    expect(result.stats).toMatchObject({ engine: "v8", host: "remote", bridgeCalls: 2 });
  });

  it("calls the right host function when two have the same label, as in process", async () => {
    // Both are labelled globals.a.b.c: the remote host called the second for both.
    const globals = { a: { "b.c": async () => "f1", b: { c: async () => "f2" } } };
    const code = `export default async () => [await a["b.c"](), await a.b.c()]`;
    const { url } = await executor();
    await using remote = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    await using local = await createSandbox({ engine: "v8", host: "inprocess" });
    expect(await local.run({ code, globals })).toMatchObject({ ok: true, value: ["f1", "f2"] });
    expect(await remote.run({ code, globals })).toMatchObject({ ok: true, value: ["f1", "f2"] });
  });

  it("an abort ends the run on the executor too", async () => {
    const service = await executor();
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("enough")), 300);
    const result = await sandbox.run({
      code: "export default () => { for (;;) {} }",
      signal: controller.signal,
      limits: { wallTimeMs: 20_000 },
    });
    expect(result.status).toBe("aborted");
    // The spinning guest does not keep its run slot on the executor for 20 s.
    const health = async () => ((await (await fetch(`${service.url}/health`)).json()) as { load: { activeRuns: number } }).load;
    for (let i = 0; i < 100 && (await health()).activeRuns > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect((await health()).activeRuns).toBe(0);
  });

  it("a prefix the executor lost is prepared again, cold, and the call succeeds", async () => {
    const first = await executor();
    const port = Number(new URL(first.url).port);
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: first.url, secret: SECRET } });
    await using prefix = await sandbox.prepare({ code: "let n = 0; export const next = () => ++n" });
    expect((await prefix.call({ export: "next" })).ok).toBe(true);
    // The executor restarts on the same address: it holds no prefixes now.
    await first.close({ graceMs: 0 });
    await executor({ port });
    const again = await prefix.call({ export: "next" });
    expect(again.ok && again.value).toBe(1);
    expect(again.stats.warm).toBe(false);
    const warm = await prefix.call({ export: "next" });
    expect(warm.ok && warm.value).toBe(2);
    expect(warm.stats.warm).toBe(true);
  });

  // The README: "Prefixes of different clients never share a warm instance, whatever their keys."
  it("two clients' prefixes with the same code and partition key never share an instance or its state", async () => {
    const { url } = await executor();
    await using a = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    await using b = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    const code = "let n = 0; export const next = () => ++n";
    await using prefixA = await a.prepare({ code, partitionKey: "tenant" });
    await using prefixB = await b.prepare({ code, partitionKey: "tenant" });
    const seen: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      for (const prefix of [prefixA, prefixB]) {
        const called = await prefix.call({ export: "next" });
        seen.push(called.ok ? called.value : called.error.code);
      }
    }
    // Shared, the counter would run 1..6 across both.
    expect(seen).toEqual([1, 1, 2, 2, 3, 3]);
  });
});

describe("host bindings answered by the user's own app (createRpcHandler mounted there)", () => {
  it("the executor calls back at the app's URL; the app's handler verifies and dispatches", async () => {
    const service = await executor();
    const rpc = createRpcHandler({ key: "an-app-signing-key-of-at-least-32-bytes!" });
    let seen = 0;
    // The user's app: a plain node server that hands /cordon-rpc to the handler, 404 elsewhere.
    const app: Server = createServer(async (req, res) => {
      if (req.url !== "/cordon-rpc") return void res.writeHead(404).end();
      seen++;
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const answer = await rpc.handle(
        new Request(`http://app${req.url}`, {
          method: req.method,
          headers: req.headers as Record<string, string>,
          body: Buffer.concat(chunks),
        }),
      );
      res.writeHead(answer.status, { "content-type": "application/json" }).end(await answer.text());
    });
    await new Promise<void>((resolve) => app.listen(0, "127.0.0.1", resolve));
    cleanup.push(() => new Promise((resolve) => app.close(resolve)));
    const url = `http://127.0.0.1:${(app.address() as AddressInfo).port}/cordon-rpc`;
    await using sandbox = await createSandbox({
      engine: "v8",
      host: "remote",
      remote: { url: service.url, secret: SECRET, callback: { url, rpc } },
    });
    const result = await sandbox.run({
      code: "export default async () => (await greet('ada')) + '!'",
      globals: { greet: async (name: string) => `hello ${name}` },
    });
    expect(result.ok && result.value).toBe("hello ada!");
    expect(seen).toBe(1);
  });
});

describe("an executor that is down, refuses or stalls", () => {
  it("down: ERR_EXECUTOR_UNREACHABLE naming the URL, for run, prepare, call and readExports; nothing throws", async () => {
    const url = await fakeExecutor(() => {});
    // A port that was free a moment ago: connection refused.
    const closed = `http://127.0.0.1:${Number(new URL(url).port)}`;
    await cleanup.pop()?.();
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: closed, secret: SECRET } });
    const result = await sandbox.run({ code: "export default 1" });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.code).toBe("ERR_EXECUTOR_UNREACHABLE");
    expect(result.error.message).toContain(closed);
    await expect(sandbox.prepare({ code: "export const f = () => 1" })).rejects.toMatchObject({
      code: "ERR_EXECUTOR_UNREACHABLE",
    });
    await expect(sandbox.readExports({ code: "export const a = 1" })).rejects.toMatchObject({ code: "ERR_EXECUTOR_UNREACHABLE" });
  });

  it("refuses: a wrong secret comes back as ERR_EXECUTOR_UNREACHABLE with the refusal", async () => {
    const service = await executor();
    await using sandbox = await createSandbox({
      engine: "quickjs",
      host: "remote",
      remote: { url: service.url, secret: "a-wrong-secret-that-is-long-enough-0123456789" },
    });
    const result = await sandbox.run({ code: "export default 1" });
    expect(!result.ok && result.error.code).toBe("ERR_EXECUTOR_UNREACHABLE");
    expect(!result.ok && result.error.message).toMatch(/refused the request: 401 ERR_UNAUTHORIZED/);
    expect(!result.ok && result.error.message).not.toContain("a-wrong-secret");
  });

  it("answers garbage: ERR_EXECUTOR_UNREACHABLE, not a throw", async () => {
    const url = await fakeExecutor((_req, _body, res) => res.writeHead(200).end("{not json"));
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    const result = await sandbox.run({ code: "export default 1" });
    expect(!result.ok && result.error.message).toMatch(/not a run result/);
  });

  it("answers more than a run with these limits can: the client stops reading at the cap", async () => {
    // 200 MiB of JSON whitespace before a valid result: read whole, it took the client's RSS from
    // 55 to 471 MiB (400 MiB sent). An executor is trusted with the guest, not with the host.
    let sent = 0;
    const url = await fakeExecutor(async (_req, _body, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      const chunk = Buffer.alloc(1 << 20, 0x20);
      for (let i = 0; i < 200 && !res.destroyed; i++) {
        sent += chunk.length;
        if (!res.write(chunk)) await new Promise((resolve) => res.once("drain", resolve).once("close", resolve));
      }
      res.end(JSON.stringify({ status: "completed", ok: true, value: 1, exports: {}, skippedExports: [], logs: [] }));
    });
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    const result = await sandbox.run({
      code: "export default 1",
      limits: { maxOutputBytes: 1024, maxLogBytes: 1024, maxLogEntries: 10 },
    });
    expect(!result.ok && result.error.code).toBe("ERR_EXECUTOR_UNREACHABLE");
    expect(!result.ok && result.error.message).toMatch(/answered with more than \d+ bytes/);
    // What the client took before it closed the connection: its cap plus what the sockets buffered.
    expect(sent).toBeLessThan(64 * 1024 * 1024);
  });

  it("stalls: the request ends at the run's wall time + 10 s", async () => {
    const url = await fakeExecutor(() => {});
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    const started = performance.now();
    const result = await sandbox.run({ code: "export default 1", limits: { wallTimeMs: 100 } });
    const elapsed = performance.now() - started;
    expect(!result.ok && result.error.code).toBe("ERR_EXECUTOR_UNREACHABLE");
    // The wall time left after the compile (a first compile under load took 7 ms of the 100) + 10 s.
    const waited = Number(
      /did not answer within (\d+) ms \(the run's wall time \+ 10000 ms\)/.exec(!result.ok ? result.error.message : "")?.[1],
    );
    expect(waited).toBeGreaterThan(10_000);
    expect(waited).toBeLessThanOrEqual(10_100);
    expect(elapsed).toBeGreaterThanOrEqual(10_000);
    expect(elapsed).toBeLessThan(20_000);
  }, 30_000);
});

describe("grants on the host's callback server, attacked by a hostile executor", () => {
  it("dispatches only the granted names of the grant's own run, while that run lasts", async () => {
    const calls: string[] = [];
    let verdicts: Record<string, number> = {};
    let stolen: { callback: NonNullable<RemoteRequest["callback"]> } | undefined;
    const url = await fakeExecutor(async (_req, body, res) => {
      const request = JSON.parse(body) as RemoteRequest;
      const callback = request.callback!;
      stolen = { callback };
      const [payload, signature] = callback.grant.split(".");
      const claims = JSON.parse(Buffer.from(payload, "base64url").toString()) as Record<string, unknown>;
      const forge = (changes: Record<string, unknown>) =>
        `${Buffer.from(JSON.stringify({ ...claims, ...changes })).toString("base64url")}.${signature}`;
      const args = codec.encode(["from the executor"]);
      verdicts = {
        granted: (await callBack(callback, callback.grant, { run: callback.run, name: "globals.lookup", argsText: args })).status,
        notGranted: (await callBack(callback, callback.grant, { run: callback.run, name: "globals.deleteAll", argsText: args }))
          .status,
        forgedNames: (
          await callBack(callback, forge({ names: [...(claims.names as string[]), "globals.deleteAll"] }), {
            run: callback.run,
            name: "globals.deleteAll",
            argsText: args,
          })
        ).status,
        forgedExpiry: (
          await callBack(callback, forge({ exp: Date.now() + 3_600_000 }), {
            run: callback.run,
            name: "globals.lookup",
            argsText: args,
          })
        ).status,
        otherRun: (await callBack(callback, callback.grant, { run: "another-run", name: "globals.lookup", argsText: args }))
          .status,
        noGrant: (await fetch(callback.url, { method: "POST", body: "{}" })).status,
      };
      res.writeHead(200, { "content-type": "application/json" }).end(okResultText("done"));
    });
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    const result = await sandbox.run({
      code: "export default () => 1",
      globals: { lookup: async (who: string) => void calls.push(`lookup:${who}`) },
    });
    expect(result.ok && result.value).toBe("done");
    expect(stolen?.callback.names).toEqual(["globals.lookup"]);
    // The grant names only this run's bindings: a name it lacks is refused (403), a grant edited
    // to add one or to live longer fails its signature (401), and it is worth nothing for another run.
    expect(verdicts).toEqual({ granted: 200, notGranted: 403, forgedNames: 401, forgedExpiry: 401, otherRun: 401, noGrant: 401 });
    expect(calls).toEqual(["lookup:from the executor"]);
    // After the run: the same grant is worth nothing.
    const replay = await callBack(stolen!.callback, stolen!.callback.grant, {
      run: stolen!.callback.run,
      name: "globals.lookup",
      argsText: codec.encode(["replayed"]),
    });
    expect(replay.status).toBe(404);
    expect(calls).not.toContain("lookup:replayed");
  });

  it("a run without host functions carries no grant and starts no callback server", async () => {
    let request: RemoteRequest | undefined;
    const url = await fakeExecutor((_req, body, res) => {
      request = JSON.parse(body) as RemoteRequest;
      res.writeHead(200).end(okResultText(1));
    });
    await using sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url, secret: SECRET } });
    await sandbox.run({ code: "export default 1", globals: { data: { plain: true } } });
    expect(request?.t).toBe("run");
    expect(request?.callback).toBeUndefined();
  });
});

describe("selecting the remote host", () => {
  const saved = { ...process.env };
  afterEach(() => {
    for (const key of ["CORDON_HOST", "CORDON_EXEC_URL", "CORDON_EXEC_SECRET"]) {
      if (saved[key] === undefined) delete process.env[key];
      else process.env[key] = saved[key];
    }
  });

  it("auto picks remote when CORDON_EXEC_URL is set, with CORDON_EXEC_SECRET", async () => {
    const service = await executor();
    process.env.CORDON_EXEC_URL = service.url;
    process.env.CORDON_EXEC_SECRET = SECRET;
    await using sandbox = await createSandbox();
    const result = await sandbox.run({ code: "export default 6 * 7" });
    expect(result.ok && result.value).toBe(42);
    expect(result.stats.host).toBe("remote");
  });

  it("refuses a missing URL, a short secret and a non-http URL at start-up, never echoing the secret", async () => {
    await expect(createSandbox({ host: "remote" })).rejects.toMatchObject({ code: "ERR_ENGINE_UNAVAILABLE" });
    await expect(
      createSandbox({ host: "remote", remote: { url: "http://127.0.0.1:1", secret: "short-secret" } }),
    ).rejects.toThrow(/at least 32 bytes/);
    await expect(
      createSandbox({ host: "remote", remote: { url: "http://127.0.0.1:1", secret: "short-secret" } }),
    ).rejects.not.toThrow(/short-secret/);
    // Secrets the executor refuses to start with: each failed every run instead (a trailing
    // newline as ERR_EXECUTOR_UNREACHABLE "invalid authorization header", an inner space as a 401).
    for (const secret of [`${SECRET}\n`, `${SECRET.slice(0, 20)} ${SECRET.slice(20)}`, "é".repeat(40)]) {
      const refused = createSandbox({ host: "remote", remote: { url: "http://127.0.0.1:1", secret } });
      await expect(refused).rejects.toThrow(TypeError);
      await expect(refused).rejects.toThrow(/options\.remote\.secret .*visible ASCII/);
    }
    await expect(createSandbox({ host: "remote", remote: { url: "file:///etc/passwd", secret: SECRET } })).rejects.toThrow(
      /http\(s\) URL/,
    );
    await expect(
      createSandbox({ engine: "trusted", host: "remote", remote: { url: "http://127.0.0.1:1", secret: SECRET } }),
    ).rejects.toThrow(/trusted engine runs in this process/);
  });
});
