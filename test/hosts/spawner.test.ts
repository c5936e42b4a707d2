import { spawn } from "node:child_process";
import { readFileSync, readlinkSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { spawnerReady } from "../../src/core/spawner.js";
import { createSandbox, type Sandbox } from "../../src/index.js";
import { alive, descendants, disposedAfterEach, running, until, workerPids } from "../helpers/processes.js";

/**
 * The spawner process (src/core/spawner.ts) starts the process host's workers once it is
 * ready, so a fork of the host (7–39 ms of its event loop, measured) is not paid for each worker
 * the pool replaces or recycles. These tests look at the real processes through /proc.
 */

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return "";
  }
}

function fdLinks(pid: number): string[] {
  const links: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      links.push(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {}
  }
  return links;
}

/** Kill the sandbox's first worker (spawned by the host) and wait for its replacement. */
async function replacedWorker(sandbox: Sandbox): Promise<number> {
  await until(() => workerPids(sandbox).some((pid) => pid > 0), 15_000);
  const [first] = workerPids(sandbox);
  process.kill(first as number, "SIGKILL");
  await until(() => workerPids(sandbox).some((pid) => pid > 0 && pid !== first), 15_000);
  return workerPids(sandbox).find((pid) => pid > 0 && pid !== first) as number;
}

const SPIN = "export default () => { for (;;) {} }";
const SPIN_LIMITS = { cpuTimeMs: 20_000, wallTimeMs: 20_000 };

describe("the spawner process", () => {
  const opened = disposedAfterEach();

  it("starts the workers after the first: its child, with nothing of the host's environment or descriptors", async () => {
    process.env.CORDON_SPAWNER_TEST_SECRET = "do-not-leak";
    try {
      const s = opened(await createSandbox({ engine: "v8", host: "process", workers: { min: 1 } }));
      expect((await s.run({ code: "export default 1" })).ok).toBe(true);
      const helper = await spawnerReady();
      expect(helper).toBeGreaterThan(0);
      expect(parentOf(helper as number)).toBe(process.pid);
      expect(readFileSync(`/proc/${helper}/cmdline`, "utf8")).toContain("spawner-main.js");

      const worker = await replacedWorker(s);
      expect(parentOf(worker)).toBe(helper);
      const environ = readFileSync(`/proc/${worker}/environ`, "latin1").split("\0").filter(Boolean);
      expect(environ.join("\n")).not.toContain("do-not-leak");
      expect(environ.some((entry) => entry.startsWith("NODE_CHANNEL"))).toBe(false);
      expect(readFileSync(`/proc/${worker}/oom_score_adj`, "latin1").trim()).toBe("1000");
      // The helper's channel to the host is not the worker's to write to.
      const channel = readlinkSync(`/proc/${helper}/fd/3`);
      expect(channel).toMatch(/^socket:/);
      expect(fdLinks(worker)).not.toContain(channel);

      // The replacement serves runs; one killed from outside fails alone, and the next succeeds.
      expect(await s.run({ code: "export default () => 2" })).toMatchObject({ ok: true, value: 2 });
      const spinning = s.run({ code: SPIN, limits: SPIN_LIMITS });
      await until(() => s.stats().activeRuns === 1);
      await new Promise((r) => setTimeout(r, 100));
      process.kill(worker, "SIGKILL");
      const killed = await spinning;
      expect(killed.ok).toBe(false);
      expect(!killed.ok && killed.error.code).toBe("ERR_INSTANCE_RESET");
      expect(await s.run({ code: "export default () => 3" })).toMatchObject({ ok: true, value: 3 });
      expect(alive(process.pid)).toBe(true);
    } finally {
      delete process.env.CORDON_SPAWNER_TEST_SECRET;
    }
  }, 60_000);

  it("killed from outside, takes its workers with it: their runs fail with ERR_INSTANCE_RESET, and later runs succeed", async () => {
    const s = opened(await createSandbox({ engine: "v8", host: "process", workers: { min: 1 } }));
    const helper = (await spawnerReady()) as number;
    expect(helper).toBeGreaterThan(0);
    const worker = await replacedWorker(s);
    expect(parentOf(worker)).toBe(helper);
    const spinning = s.run({ code: SPIN, limits: SPIN_LIMITS });
    await until(() => s.stats().activeRuns === 1);
    await new Promise((r) => setTimeout(r, 100));
    process.kill(helper, "SIGKILL");
    const started = performance.now();
    const lost = await spinning;
    // Long before the guest's 20 s limits: the host ended the worker when the helper went.
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(lost.ok).toBe(false);
    expect(!lost.ok && lost.error.code).toBe("ERR_INSTANCE_RESET");
    // (Gone or a zombie: the worker's new parent may never reap it in a container.)
    await until(() => !running(worker) && !running(helper), 10_000);
    for (let i = 0; i < 3; i++) {
      expect(await s.run({ code: `export default () => ${i}` })).toMatchObject({ ok: true, value: i });
    }
    // A new helper for the pools still here.
    const next = await spawnerReady();
    expect(next).toBeGreaterThan(0);
    expect(next).not.toBe(helper);
  }, 60_000);

  it("goes when the last sandbox using it is disposed, after its workers: no process is left", async () => {
    const a = await createSandbox({ engine: "v8", host: "process", workers: { min: 1 } });
    const b = await createSandbox({ engine: "quickjs", host: "process", workers: { min: 1 } });
    const helper = (await spawnerReady()) as number;
    expect(helper).toBeGreaterThan(0);
    const workers = [await replacedWorker(a), await replacedWorker(b)];
    for (const worker of workers) expect(parentOf(worker)).toBe(helper);
    await a.dispose();
    // b still uses it.
    expect(alive(helper)).toBe(true);
    expect((await b.run({ code: "export default 1" })).ok).toBe(true);
    await b.dispose();
    // (cordon's esbuild service may live on: it is not the process host's.)
    await until(() => descendants().every((each) => !/(spawner|worker)-main\.js/.test(commandLine(each.pid))), 10_000);
    // Exited (the host reaps its helper on its own loop's time: a zombie for a moment).
    await until(() => !running(helper) && workers.every((worker) => !running(worker)), 10_000);
  }, 60_000);

  it("starts the deno engine's processes too, with nothing of the host's environment or descriptors", async () => {
    process.env.CORDON_SPAWNER_TEST_SECRET = "do-not-leak";
    try {
      const s = opened(await createSandbox({ engine: "deno", spareInstances: 0 }));
      const helper = (await spawnerReady()) as number;
      expect(helper).toBeGreaterThan(0);
      const result = await s.run({ code: "export default () => Deno.pid" });
      expect(result.ok).toBe(true);
      const pid = (result.ok && result.value) as number;
      // Deno reports its own pid: setpriv, where it wraps Deno, execs it in the same process.
      expect(parentOf(pid)).toBe(helper);
      const environ = readFileSync(`/proc/${pid}/environ`, "latin1");
      expect(environ).not.toContain("do-not-leak");
      expect(environ).toContain("DENO_DIR=");
      expect(fdLinks(pid)).not.toContain(readlinkSync(`/proc/${helper}/fd/3`));
      expect(readFileSync(`/proc/${pid}/oom_score_adj`, "latin1").trim()).toBe("1000");
      expect(await s.run({ code: "export default () => 2" })).toMatchObject({ ok: true, value: 2 });
    } finally {
      delete process.env.CORDON_SPAWNER_TEST_SECRET;
    }
  }, 60_000);

  it("goes with the child it was starting when the host exits right after asking for it", async () => {
    // The helper hands each child's pipes to the host, and Node holds back the channel's
    // 'disconnect' until the host acknowledges every handle: a host gone before it did left the
    // helper and the child running for good (found after a test run: a Deno process and its
    // helper, parent 1, 20 minutes on). A sleep with a number of its own marks the child.
    const seconds = `${900 + Math.floor(Math.random() * 99)}.25`;
    const dist = (path: string) => JSON.stringify(fileURLToPath(new URL(`../../dist/${path}`, import.meta.url)));
    const script = `const { useSpawner, spawnChild, spawnerReady } = await import(${dist("core/spawner.js")});
      useSpawner();
      setInterval(() => {}, 1000);
      const helper = await spawnerReady();
      process.stdout.write(helper + "\\n", () => {
        spawnChild("sleep", ["${seconds}"], { cwd: "/", env: {}, stdio: ["pipe", "pipe", "pipe"] });
        process.exit(0);
      });`;
    const host = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    host.stdout.on("data", (d) => {
      out += d;
    });
    await new Promise((resolve) => host.once("exit", resolve));
    const helper = Number(out.trim());
    expect(helper).toBeGreaterThan(0);
    const sleeping = () =>
      readdirSync("/proc")
        .filter((name) => /^\d+$/.test(name))
        .map(Number)
        .filter((pid) => commandLine(pid) === `sleep\0${seconds}\0` && running(pid));
    try {
      await until(() => !running(helper) && sleeping().length === 0, 5000);
    } finally {
      for (const pid of [helper, ...sleeping()].filter(running)) process.kill(pid, "SIGKILL");
    }
  }, 30_000);

  it("goes with its workers when the host is killed with SIGKILL, a spinning guest's included", async () => {
    const dist = (path: string) => JSON.stringify(fileURLToPath(new URL(`../../dist/${path}`, import.meta.url)));
    const script = `const { createSandbox } = await import(${dist("index.js")});
      const { spawnerReady } = await import(${dist("core/spawner.js")});
      const sandbox = await createSandbox({ host: "process", engine: "v8", workers: { min: 1 } });
      await sandbox.run({ code: "export default 1" });
      const helper = await spawnerReady();
      const [first] = sandbox.stats().workers.map((w) => w.pid);
      process.kill(first, "SIGKILL");
      while (!sandbox.stats().workers.some((w) => w.pid > 0 && w.pid !== first)) await new Promise((r) => setTimeout(r, 20));
      sandbox.run({ code: ${JSON.stringify(SPIN)}, limits: { cpuTimeMs: 20000, wallTimeMs: 20000 } });
      setTimeout(() => console.log([helper, ...sandbox.stats().workers.map((w) => w.pid)].join(",")), 300);
      setInterval(() => {}, 1000);`;
    const host = spawn(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const line = await new Promise<string>((resolve, reject) => {
      host.stdout.once("data", (d) => resolve(String(d)));
      host.once("exit", (code) => reject(new Error(`the host exited first (code ${code})`)));
    });
    const [helper, ...workers] = line.trim().split(",").map(Number);
    expect(helper).toBeGreaterThan(0);
    expect(workers.map(parentOf)).toEqual(workers.map(() => helper));
    host.kill("SIGKILL");
    const pids = [helper as number, ...workers];
    try {
      await until(() => pids.every((pid) => !running(pid)), 5000);
    } finally {
      for (const pid of pids.filter(running)) process.kill(pid, "SIGKILL");
    }
  }, 30_000);
});
