import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createExecutor } from "../../src/executor/server.js";
import { alive, childPids, SECRET } from "./helpers.js";
import { prepareBody } from "./host-requests.js";

/**
 * `cordon serve` as a process: the built dist/ (npm run build first). Started with
 * --no-node-snapshot directly, as bin/cordon.js would re-exec itself with it: a SIGTERM must
 * reach the serving process itself, not the re-exec wrapper.
 */
const BIN = fileURLToPath(new URL("../../bin/cordon.js", import.meta.url));

interface Served {
  child: ChildProcess;
  url: string;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

async function startServe(args: string[], env: Record<string, string | undefined>): Promise<Served> {
  const child = spawn(process.execPath, ["--no-node-snapshot", BIN, "serve", "--port", "0", ...args], {
    env: { ...process.env, CORDON_EXEC_SECRET: undefined, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr!.on("data", (chunk) => {
    stderr += chunk;
  });
  const exited = once(child, "exit").then(([code]) => code as number | null);
  const firstLine = new Promise<string>((resolve, reject) => {
    child.stdout!.on("data", (chunk) => {
      stdout += chunk;
      if (stdout.includes("\n")) resolve(stdout.split("\n")[0]);
    });
    void exited.then((code) => reject(new Error(`serve exited ${code}: ${stderr}`)));
  });
  const url = /listening on (http:\/\/\S+)$/.exec(await firstLine)?.[1];
  if (!url) throw new Error(`no URL in the first line: ${stdout}`);
  return { child, url, stdout: () => stdout, stderr: () => stderr, exited };
}

function run(url: string, secret: string, body: unknown) {
  return fetch(`${url}/run`, {
    method: "POST",
    headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** Wait until the executor is answering a run, so it is in flight when the signal lands. */
async function inFlight(url: string): Promise<void> {
  for (let i = 0; i < 250; i++) {
    const health = (await (await fetch(`${url}/health`)).json()) as { load: { activeRuns: number } };
    if (health.load.activeRuns > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error("the run never showed up in /health");
}

const slow = (ms: number) => ({
  code: `export default async () => { await new Promise((r) => setTimeout(r, ${ms})); return "finished" }`,
  limits: { wallTimeMs: 20_000 },
});

describe("cordon serve", () => {
  it("prints the URL first, a generated secret once and a curl example that reads it from the environment", async () => {
    const served = await startServe([], {});
    try {
      const exported = /export CORDON_EXEC_SECRET=(\S+)/.exec(served.stdout())?.[1];
      expect(exported).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(served.stdout().split(exported!).length - 1).toBe(1);
      expect(served.stdout()).toContain(`-H "authorization: Bearer $CORDON_EXEC_SECRET"`);
      expect(served.stdout()).toContain(`${served.url}/run`);
      expect((await run(served.url, exported!, { code: "return 1" })).status).toBe(200);
      expect(served.stderr()).not.toContain(exported!);
    } finally {
      served.child.kill("SIGTERM");
    }
    expect(await served.exited).toBe(0);
  });

  it.each(["SIGTERM", "SIGHUP"] as const)(
    "on %s, finishes the run in flight, ends its workers and exits 0; never shows a configured secret",
    async (signal) => {
      const served = await startServe([], { CORDON_EXEC_SECRET: SECRET });
      expect(served.stdout()).toContain("CORDON_EXEC_SECRET");
      const pending = run(served.url, SECRET, slow(1_000));
      await inFlight(served.url);
      const workers = childPids(served.child.pid!);
      expect(workers.length).toBeGreaterThan(0);
      served.child.kill(signal);
      await new Promise((resolve) => setTimeout(resolve, 100));
      // New work is no longer taken: the listener is closed (or, on a kept-alive connection, a 503).
      const late = await run(served.url, SECRET, { code: "return 1" }).then(
        (r) => r.status,
        () => "refused",
      );
      expect(["refused", 503]).toContain(late);

      const response = await pending;
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ status: "completed", value: "finished" });
      expect(await served.exited).toBe(0);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(workers.filter(alive)).toEqual([]);
      expect(served.stdout() + served.stderr()).not.toContain(SECRET);
      expect(served.stderr()).toContain('"event":"stopped"');
    },
  );

  it("aborts runs still going after the grace period, answers them, and exits 0", async () => {
    const served = await startServe(["--grace-ms", "300"], { CORDON_EXEC_SECRET: SECRET });
    const pending = run(served.url, SECRET, slow(15_000));
    await inFlight(served.url);
    const started = Date.now();
    served.child.kill("SIGTERM");
    const response = await pending;
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: "aborted", error: { code: "ERR_ABORTED" } });
    expect(await served.exited).toBe(0);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("refuses a grace period past Node's longest timer at start-up (it meant no grace at all)", async () => {
    // 2^31 ms: Node warned (TimeoutOverflowWarning) and waited 1 ms instead.
    const out = spawnSync(process.execPath, [BIN, "serve", "--port", "0", "--grace-ms", "2147483648"], {
      encoding: "utf8",
      timeout: 20_000,
      env: { ...process.env, CORDON_EXEC_SECRET: SECRET },
    });
    expect(out.status).toBe(2);
    expect(out.stderr).toContain("--grace-ms must be at most 2000000000");
    await expect(createExecutor({ port: 0, shutdownGraceMs: 2 ** 31, logger: false })).rejects.toThrow(
      /shutdownGraceMs must be a number from 0 to 2000000000/,
    );
  });

  it("--max-prefix-mb bounds the source of the prefixes it holds: a prepare past it fails with ERR_CAPACITY naming the flag", async () => {
    const served = await startServe(["--max-prefix-mb", "1"], { CORDON_EXEC_SECRET: SECRET });
    try {
      const body = await prepareBody(`const pad = "${"x".repeat(600 * 1024)}"; export default 1`);
      const response = await fetch(`${served.url}/host`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      expect(response.status).toBe(200);
      const result = JSON.parse(await response.text()) as { ok: boolean; error: { code: string; message: string } };
      expect(result).toMatchObject({ ok: false, error: { code: "ERR_CAPACITY" } });
      expect(result.error.message).toContain("--max-prefix-mb");
    } finally {
      served.child.kill("SIGTERM");
      await served.exited;
    }
  }, 30_000);
});
