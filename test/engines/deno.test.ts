import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunResult, type Sandbox, createSandbox } from "../../src/index.js";
import { importSpecifiers, replaceSpecifiers, rewriteSpecifier } from "../../src/engines/deno/modules.js";
import { closeWebStorage, privateTempDir } from "../../src/engines/deno/private-dir.js";
import { DENO_DEFAULT_IMPORT_HOSTS, denoArgs } from "../../src/engines/deno/process.js";
import { NODE_BUILTINS } from "../../src/engines/deno/script.js";
import { completed, failed } from "../conformance/results.js";
import { alive, until } from "../helpers/processes.js";

/** The deno engine's own guarantees: permissions, entry points, processes per function, memory. */
function outcome(result: RunResult): string {
  return result.ok ? "completed" : result.error.code;
}

type Workers = NonNullable<ReturnType<Sandbox["stats"]>["workers"]>;
const functionPids = (sandbox: Sandbox): Workers =>
  (sandbox.stats().workers ?? []).filter((w) => w.partition.startsWith("function:"));

describe("the deno engine", () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ engine: "deno", spareInstances: 1 });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it("web storage is off: no localStorage, sessionStorage or caches, and Deno's store for them is a file", async () => {
    // Before: Deno kept both under the shared DENO_DIR, keyed by the one bootstrap, so a value
    // one function stored was read back by another function in another sandbox.
    const code = `export default () => [typeof localStorage, typeof sessionStorage, typeof caches]`;
    expect(completed(await sandbox.run({ code })).value).toEqual(["undefined", "undefined", "undefined"]);
    const dir = mkdtempSync(join(tmpdir(), "cordon-test-denodir-"));
    try {
      mkdirSync(join(dir, "location_data", "old"), { recursive: true });
      writeFileSync(join(dir, "location_data", "old", "local_storage"), "another tenant's data");
      closeWebStorage(dir);
      expect(statSync(join(dir, "location_data")).isFile()).toBe(true);
      closeWebStorage(dir); // idempotent
      expect(statSync(join(dir, "location_data")).isFile()).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // A cache directory the caller passes is theirs: its web storage is left as it is.
    const theirs = mkdtempSync(join(tmpdir(), "cordon-test-denodir-"));
    try {
      mkdirSync(join(theirs, "location_data", "app"), { recursive: true });
      writeFileSync(join(theirs, "location_data", "app", "local_storage"), "their data");
      await using own = await createSandbox({ engine: "deno", spareInstances: 0, deno: { cacheDir: theirs } });
      expect(completed(await own.run({ code })).value).toEqual(["undefined", "undefined", "undefined"]);
      expect(readFileSync(join(theirs, "location_data", "app", "local_storage"), "utf8")).toBe("their data");
    } finally {
      rmSync(theirs, { recursive: true, force: true });
    }
  });

  it("the shared bootstrap and cache directories are this user's and private; a planted one is not used", () => {
    const root = mkdtempSync(join(tmpdir(), "cordon-test-tmp-"));
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = root;
    try {
      const dir = privateTempDir("cordon-x");
      expect(dir).toBe(join(root, `cordon-x-${process.getuid?.()}`));
      expect(statSync(dir).mode & 0o077).toBe(0);
      expect(privateTempDir("cordon-x")).toBe(dir);
      // Open to others (as someone else's planted directory would be): a fresh private one instead.
      chmodSync(dir, 0o777);
      const fresh = privateTempDir("cordon-x");
      expect(fresh).not.toBe(dir);
      expect(statSync(fresh).mode & 0o077).toBe(0);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("import syntax in the guest's strings stays the guest's data (no private path in it)", async () => {
    const code = `import { answer } from "db"; import * as fs from "fs";
      export default () => ({ text: 'import x from "db"; export * from "fs"; import("db")', got: answer, fs: typeof fs.readFileSync });`;
    const value = completed(await sandbox.run({ code, imports: { db: { answer: 1 } } })).value;
    expect(value).toEqual({ text: 'import x from "db"; export * from "fs"; import("db")', got: 1, fs: "function" });
  });

  it("an import that climbs out of the private directory is refused, naming the path as the guest wrote it", async () => {
    // why: the private directory's parents (the host's directory of Deno processes, one per
    // process) reached the caller in the refusal's text; paths inside it were already rewritten.
    for (const specifier of ["../x.js", "../../x.js"]) {
      const result = failed(
        await sandbox.run({ code: `export default async () => { await import(${JSON.stringify(specifier)}) }` }),
      );
      const text = `${result.error.message}\n${result.error.stack ?? ""}`;
      expect(text).toContain(`"${specifier}"`);
      expect(text).not.toMatch(/cordon-deno-host-|\/tmp\//);
    }
  });

  it("runs of the same code with other `imports` objects get their own data and functions", async () => {
    // Deno evaluates a module once per process: keyed by code alone, tenant B's run read tenant A's
    // config, and a call of api.read() ran another host function of the run (its number moved).
    const code = `import cfg from "cfg"; import * as api from "api";
      export default async () => ({ key: cfg.key, read: await api.read() })`;
    const runFor = (tenant: string, globals: Record<string, unknown> = {}) =>
      sandbox.run({ code, globals, imports: { cfg: { key: `key-${tenant}` }, api: { read: async () => `read by ${tenant}` } } });
    expect(completed(await runFor("a")).value).toEqual({ key: "key-a", read: "read by a" });
    expect(completed(await runFor("b", { deleteEverything: async () => "deleted" })).value).toEqual({
      key: "key-b",
      read: "read by b",
    });
    expect(completed(await runFor("a")).value).toEqual({ key: "key-a", read: "read by a" });
  });

  it("refuses every permission-gated operation with a catchable error", async () => {
    const code = `import * as cp from "node:child_process"; import * as os from "node:os"; import * as fs from "node:fs"; import nodeProcess from "node:process";
      const attempts = {
        command: () => new Deno.Command("/bin/ls").outputSync(),
        commandOnPath: () => new Deno.Command("ls").outputSync(),
        env: () => Deno.env.get("HOME"),
        envObject: () => Deno.env.toObject(),
        connect: () => Deno.connect({ hostname: "1.1.1.1", port: 80 }),
        listen: () => Deno.listen({ port: 0 }),
        readPasswd: () => Deno.readTextFile("/etc/passwd"),
        readPasswdNode: () => fs.readFileSync("/etc/passwd", "utf8"),
        writeOutside: () => Deno.writeTextFile("/tmp/cordon-deno-escape.txt", "x"),
        ffi: () => Deno.dlopen("/lib/x86_64-linux-gnu/libc.so.6", {}),
        hostname: () => Deno.hostname(),
        osHostname: () => os.hostname(),
        childProcess: () => cp.execSync("ls"),
        spawnNode: () => cp.spawnSync("/bin/sh", ["-c", "id"]),
        symlinkOut: () => Deno.symlink("/etc/passwd", "passwd-link"),
        hardlinkOut: () => Deno.link("/etc/passwd", "passwd-hard"),
        dotdot: () => Deno.readTextFile("../../etc/passwd"),
        procEnviron: () => Deno.readTextFile("/proc/self/environ"),
        kill: () => Deno.kill(1, "SIGTERM"),
        // To itself: SIGSTOP froze its CPU clock; an abort could pass for running out of memory.
        killSelf: () => Deno.kill(Deno.pid, "SIGCONT"),
        processKillSelf: () => nodeProcess.kill(nodeProcess.pid, "SIGCONT"),
        abort: () => nodeProcess.abort(),
      };
      export default async () => {
        const out = {};
        for (const [name, attempt] of Object.entries(attempts)) {
          try { await attempt(); out[name] = "allowed"; } catch (e) { out[name] = e.name; }
        }
        out.execPath = Deno.execPath();
        out.writeInside = await Deno.writeTextFile("scratch.txt", "ok").then(() => Deno.readTextFile("scratch.txt"));
        return out;
      }`;
    const value = completed(await sandbox.run({ code })).value as Record<string, string>;
    const { writeInside, execPath, ...refused } = value;
    expect(writeInside).toBe("ok");
    // Deno answers execPath without a permission; cordon's answer names no host path.
    expect(execPath).toBe("deno");
    for (const [name, result] of Object.entries(refused)) expect(result, name).not.toBe("allowed");
    expect(refused.env).toBe("NotCapable");
    expect(refused.readPasswd).toBe("NotCapable");
    expect(refused.writeOutside).toBe("NotCapable");
    expect(refused.connect).toBe("NotCapable");
    expect(refused.command).toBe("NotCapable");
    expect([refused.killSelf, refused.processKillSelf, refused.abort]).toEqual(["NotCapable", "NotCapable", "NotCapable"]);
  });

  it("a guest that prints 'out of memory' and exits is not reported as out of memory", async () => {
    const code = `export default () => { Deno.stderr.writeSync(new TextEncoder().encode("Fatal JavaScript out of memory: Reached heap limit\\n")); Deno.exit(3) }`;
    const result = failed(await sandbox.run({ code }));
    expect(result.error.code).toBe("ERR_INSTANCE_RESET");
  });

  it("names neither the host's pid, the bootstrap's path nor its configuration", async () => {
    const code = `import process from "node:process";
      export default () => ({ ppid: Deno.ppid, nodePpid: process.ppid, mainModule: Deno.mainModule, args: Deno.args, argv: process.argv })`;
    const value = completed(await sandbox.run({ code })).value as Record<string, unknown>;
    expect(value).toEqual({ ppid: 1, nodePpid: 1, mainModule: "file:///main.js", args: [], argv: ["deno", "/main.js"] });
    // What Deno would have said: this process is the parent, the bootstrap sits in the temporary directory.
    expect(JSON.stringify(value)).not.toContain(String(process.pid));
    expect(JSON.stringify(value)).not.toContain("cordon-deno-bootstrap");
  });

  it("names neither the host's nameserver: Deno.resolveDns is refused without an address, node:dns names none", async () => {
    // why: Deno's own refusal read 'Requires net access to "<the host's nameserver>:53"', a line of
    // the host's resolv.conf the guest cannot read.
    const resolvConf = existsSync("/etc/resolv.conf") ? readFileSync("/etc/resolv.conf", "latin1") : "";
    const nameservers = resolvConf
      .split("\n")
      .filter((line) => line.startsWith("nameserver"))
      .map((line) => line.split(/\s+/)[1]);
    const code = `import dns from "node:dns";
      export default async () => {
        const out = [];
        for (const f of [() => Deno.resolveDns("example.com", "A"), () => dns.promises.resolve4("example.com"), () => dns.getServers()]) {
          try { out.push("answered " + JSON.stringify(await f())) } catch (e) { out.push(e.name + ": " + e.message) }
        }
        return out;
      }`;
    const value = completed(await sandbox.run({ code })).value as string[];
    expect(value[0]).toMatch(/^NotCapable: Deno.resolveDns is not available in cordon's sandbox/);
    for (const line of value) {
      expect(line).not.toMatch(/^answered/);
      for (const address of nameservers) expect(line).not.toContain(address);
    }
  });

  it("no variable of the host's environment reaches the Deno process", async () => {
    process.env.CORDON_TEST_SECRET = "hunter2";
    try {
      const result = completed(await sandbox.run({ code: "export default () => 1" }));
      expect(result.value).toBe(1);
      // A spare the run's end started has pid 0 until the spawner answers (it failed CI once).
      await until(() => (sandbox.stats().workers ?? []).every((w) => w.pid > 0));
      const workers = sandbox.stats().workers ?? [];
      expect(workers.length).toBeGreaterThan(0);
      for (const worker of workers) {
        const environ = readFileSync(`/proc/${worker.pid}/environ`, "latin1").split("\0").filter(Boolean);
        expect(environ.map((e) => e.split("=")[0]).sort()).toEqual([
          "DENO_DIR",
          "DENO_NO_UPDATE_CHECK",
          "HTTPS_PROXY",
          "HTTP_PROXY",
          "NO_COLOR",
        ]);
        // The proxy variables name cordon's import proxy on loopback, with this process's credentials.
        for (const name of ["HTTPS_PROXY", "HTTP_PROXY"]) {
          const value = environ.find((e) => e.startsWith(`${name}=`))?.slice(name.length + 1) ?? "";
          expect(value).toMatch(/^http:\/\/cordon:[0-9a-f]{48}@127\.0\.0\.1:\d+$/);
        }
      }
    } finally {
      delete process.env.CORDON_TEST_SECRET;
    }
  });

  it("every Node builtin loads (the bootstrap removed no global one needs)", async () => {
    const code = `export default async () => { const failed = [];
      for (const name of ${JSON.stringify(NODE_BUILTINS)}) { try { await import("node:" + name) } catch (e) { failed.push(name + ": " + e.message) } }
      return failed }`;
    expect(completed(await sandbox.run({ code, limits: { wallTimeMs: 20_000, cpuTimeMs: 20_000 } })).value).toEqual([]);
  });

  it("SharedArrayBuffer, Atomics, Worker and WebAssembly are gone before guest code loads", async () => {
    const code =
      "export default () => [typeof SharedArrayBuffer, typeof Atomics, typeof Worker, typeof WebAssembly, typeof process, typeof Buffer]";
    expect(completed(await sandbox.run({ code })).value).toEqual(Array(6).fill("undefined"));
  });

  it("remote imports: Deno's default hosts are denied by name; capabilities.import allows only its hosts", async () => {
    const code = `export default async () => { const out = [];
      for (const url of ["https://deno.land/x/a.ts", "https://esm.sh/a", "https://example.com/a.js"]) {
        try { await import(url); out.push("imported") } catch (e) { out.push(/Requires import access/.test(e.message) ? "denied" : "attempted") } }
      return out }`;
    expect(completed(await sandbox.run({ code, limits: { wallTimeMs: 20_000 } })).value).toEqual(["denied", "denied", "denied"]);
    const granted = completed(
      await sandbox.run({ code, capabilities: { import: ["example.com"] }, limits: { wallTimeMs: 20_000 } }),
    ).value as string[];
    expect(granted.slice(0, 2)).toEqual(["denied", "denied"]);
    expect(granted[2]).not.toBe("denied");
    await expect(sandbox.run({ code: "export default 1", capabilities: { import: ["https://x"] } })).rejects.toThrow(
      /capabilities\.import/,
    );
    await using v8 = await createSandbox({ engine: "v8", host: "inprocess", spareInstances: 0 });
    await expect(v8.run({ code: "export default 1", capabilities: { import: ["esm.sh"] } })).rejects.toThrow(
      /capabilities\.import needs engine "deno"/,
    );
  });

  it("capabilities.import: a loopback host is refused, and policy.net.allow narrows the import hosts", async () => {
    const seen: string[] = [];
    const server = createServer((req, res) => {
      seen.push(req.url ?? "");
      res.writeHead(200, { "content-type": "application/javascript" });
      res.end("export default 'internal';");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const code = `import secret from "http://127.0.0.1:${port}/secret.js"; export default () => secret;`;
      for (const host of [`127.0.0.1:${port}`, "127.0.0.1", "2130706433", `localhost:${port}`, "x.localhost"]) {
        await expect(sandbox.run({ code, capabilities: { import: [host] } }), host).rejects.toThrow(/not a public host/);
      }
      expect(seen).toEqual([]);

      await using ceiling = await createSandbox({
        engine: "deno",
        spareInstances: 0,
        policy: { net: { allow: ["example.com"] } },
      });
      const probe = `export default async () => { const out = [];
        for (const url of ["https://example.com:8443/a.js", "https://example.org/a.js", "https://example.com/a.js"]) {
          try { await import(url); out.push("imported") } catch (e) { out.push(/Requires import access/.test(e.message) ? "denied" : "attempted") } }
        return out }`;
      const capabilities = { import: ["example.com", "example.com:8443", "example.org"] };
      const value = completed(await ceiling.run({ code: probe, capabilities, limits: { wallTimeMs: 20_000 } })).value as string[];
      expect(value.slice(0, 2)).toEqual(["denied", "denied"]);
      expect(value[2]).not.toBe("denied");
    } finally {
      server.close();
    }
  });

  it("cachedOnly: an npm package not in the cache fails at once, and Deno fetches nothing", async () => {
    await using cached = await createSandbox({ engine: "deno", spareInstances: 0, deno: { cachedOnly: true } });
    const result = failed(await cached.run({ code: "import pad from 'cordon-no-such-package-zz'; export default pad" }));
    expect(result.error.code).toBe("ERR_MODULE_NOT_FOUND");
    expect(result.error.message).toContain("cordon-no-such-package-zz");
    const args = denoArgs({ binary: "deno", memoryMb: 64, importHosts: [], cacheDir: "/c", cachedOnly: true }, "/p", "/b.js", {
      input: "/in",
      output: "/out",
    });
    expect(args).toContain("--cached-only");
  });

  it("the command line denies what it does not grant", () => {
    const args = denoArgs({ binary: "deno", memoryMb: 64, importHosts: [], cacheDir: "/c" }, "/p", "/b.js", {
      input: "/in",
      output: "/out",
    });
    expect(args).toContain(`--deny-import=${DENO_DEFAULT_IMPORT_HOSTS.join(",")}`);
    expect(args).toEqual(
      expect.arrayContaining(["--no-config", "--no-lock", "--no-prompt", "--allow-read=/p,/in", "--allow-write=/p,/out"]),
    );
    expect(args.some((a) => a.startsWith("--allow-net") || a.startsWith("--allow-env") || a.startsWith("--allow-run"))).toBe(
      false,
    );
    expect(args.find((a) => a.startsWith("--v8-flags"))).toMatch(/--max-old-space-size=\d+/);
    const granted = denoArgs({ binary: "deno", memoryMb: 64, importHosts: ["esm.sh"], cacheDir: "/c" }, "/p", "/b.js", {
      input: "/in",
      output: "/out",
    });
    expect(granted).toContain("--allow-import=esm.sh");
    expect(granted.some((a) => a.startsWith("--deny-import"))).toBe(false);
  });

  describe("entry points", () => {
    it("a handler given to Deno.serve answers default.fetch: the Response comes back verbatim", async () => {
      await using prefix = await sandbox.prepare({
        code: `Deno.serve(async (request) => new Response("hi " + new URL(request.url).pathname + " " + (await request.text()), {
          status: 201, statusText: "Made", headers: { "x-served-by": "deno" } }));`,
      });
      const result = await prefix.call({
        export: "default.fetch",
        args: [new Request("https://fn.example/path", { method: "POST", body: "body" })],
      });
      const response = completed(result).value as Response;
      expect(response).toBeInstanceOf(Response);
      expect(response.status).toBe(201);
      expect(response.statusText).toBe("Made");
      expect(response.headers.get("x-served-by")).toBe("deno");
      expect(await response.text()).toBe("hi /path body");
    });

    it("a one-off run with call reaches a Deno.serve handler too", async () => {
      const code = `Deno.serve(async (request) => new Response("once " + request.method + " " + (await request.text())));`;
      const request = new Request("https://fn.example/", { method: "PUT", body: "b" });
      const result = await sandbox.run({ code, call: { export: "default.fetch", args: [request] } });
      expect(await (completed(result).value as Response).text()).toBe("once PUT b");
    });

    it("export default wins over Deno.serve; export default { fetch } answers the same way", async () => {
      await using prefix = await sandbox.prepare({
        code: `Deno.serve(() => new Response("serve"));
          export default { fetch: (request) => new Response("default " + request.method) };`,
      });
      const response = completed(await prefix.call({ export: "default.fetch", args: [new Request("https://x.test/")] }))
        .value as Response;
      expect(await response.text()).toBe("default GET");
    });

    it("with neither, calling default says how to add one", async () => {
      await using prefix = await sandbox.prepare({ code: "export const helper = 1;" });
      const result = failed(await prefix.call({ export: "default.fetch", args: [] }));
      expect(result.error.code).toBe("ERR_CALL_TARGET_NOT_FOUND");
      expect(result.error.message).toMatch(/export default \{ fetch/);
      expect(result.error.message).toMatch(/Deno\.serve/);
    });
  });

  describe("processes", () => {
    it("one process per function, reused; another function or a limit change gets its own", async () => {
      const a = "export default (n) => n + 1";
      const b = "export default (n) => n + 2";
      const pidsOf = (before: Set<number>) => functionPids(sandbox).filter((w) => !before.has(w.pid));
      const before = new Set(functionPids(sandbox).map((w) => w.pid));
      const first = completed(await sandbox.run({ code: a, input: 1 }));
      expect(first.stats.warm).toBe(false);
      const [processA] = pidsOf(before);
      const second = completed(await sandbox.run({ code: a, input: 2 }));
      expect(second.value).toBe(3);
      expect(second.stats.warm).toBe(true);
      expect(pidsOf(before).map((w) => w.pid)).toEqual([processA.pid]);
      completed(await sandbox.run({ code: b, input: 1 }));
      completed(await sandbox.run({ code: a, input: 1, limits: { wallTimeMs: 4000 } }));
      const now = pidsOf(before);
      expect(now).toHaveLength(3);
      expect(new Set(now.map((w) => w.partition)).size).toBe(3);
    });

    it("a concurrent call to a busy function runs in an ephemeral process, ended after it", async () => {
      const code = "export default async (n) => { await new Promise((r) => setTimeout(r, 300)); return n }";
      completed(await sandbox.run({ code, input: 0 }));
      const results = await Promise.all([sandbox.run({ code, input: 1 }), sandbox.run({ code, input: 2 })]);
      expect(results.map((r) => completed(r).value)).toEqual([1, 2]);
      expect(results.filter((r) => r.stats.warm)).toHaveLength(1);
      await new Promise((r) => setTimeout(r, 200));
      const mine = functionPids(sandbox).filter((w) => w.runs >= 1);
      expect(new Set(mine.map((w) => w.partition)).size).toBe(mine.length);
    });

    it("bytes the guest writes to its stdout are no frames: garbage, malformed or well-formed, they change nothing", async () => {
      // Before the frames left on a FIFO of their own (process.ts), garbage retired the process,
      // a malformed field threw in the host's data handler (the host exited), and a well-formed
      // "done", "log" or "ready" frame forged an outcome, a log line or the RSS watchdog's base.
      const frames: unknown[] = [
        "garbage, not a frame",
        { t: { toString: 1, valueOf: 1 } },
        { t: "threw", code: "ERR_MODULE_NOT_FOUND", message: { toString: 1 } },
        { t: "timer", timerId: 1, ms: 1e12 },
        { t: "done", kind: "f", text: JSON.stringify({ code: "ERR_MEMORY_LIMIT", message: "forged" }) },
        { t: "log", level: "error", message: "forged" },
        { t: "ready" },
      ];
      for (const frame of frames) {
        const code = `export default async () => {
          const frame = ${JSON.stringify(frame)};
          const body = new TextEncoder().encode(typeof frame === "string" ? frame : JSON.stringify(frame));
          const out = new Uint8Array(4 + body.length);
          new DataView(out.buffer).setUint32(0, body.length);
          out.set(body, 4);
          Deno.stdout.writeSync(out);
          await new Promise((resolve) => setTimeout(resolve, 100));
          return 42;
        }`;
        const result = await sandbox.run({ code, limits: { wallTimeMs: 10_000 } });
        expect([completed(result).value, result.logs], JSON.stringify(frame)).toEqual([42, []]);
      }
    });

    it("a guest that exits its process fails only its run; the next run gets a new process", async () => {
      const result = failed(await sandbox.run({ code: "export default () => Deno.exit(3)" }));
      expect(result.error.code).toBe("ERR_INSTANCE_RESET");
      expect(completed(await sandbox.run({ code: "export default 7" })).value).toBe(7);
    });
  });

  describe("memory", () => {
    it("a typed array past the limit is ERR_MEMORY_LIMIT", async () => {
      const result = await sandbox.run({
        code: "export default () => new Uint8Array(512 * 1024 * 1024).length",
        limits: { memoryMb: 64 },
      });
      expect(outcome(result)).toBe("ERR_MEMORY_LIMIT");
    });

    it("retained ArrayBuffers past the limit are ERR_MEMORY_LIMIT, and the next run succeeds", async () => {
      const code =
        "export default () => { const a = []; for (;;) { const b = new ArrayBuffer(4 << 20); new Uint8Array(b).fill(1); a.push(b) } }";
      expect(outcome(await sandbox.run({ code, limits: { memoryMb: 48, wallTimeMs: 10_000, cpuTimeMs: 10_000 } }))).toBe(
        "ERR_MEMORY_LIMIT",
      );
      expect(completed(await sandbox.run({ code: "export default 5" })).value).toBe(5);
    });

    it("the RSS watchdog ends a process that allocates below the per-allocation check", async () => {
      const code = "export default () => { const a = []; for (;;) a.push(new Uint8Array(1024 * 1023).fill(1)) }";
      const result = failed(await sandbox.run({ code, limits: { memoryMb: 32, wallTimeMs: 10_000, cpuTimeMs: 10_000 } }));
      expect(result.error.code).toBe("ERR_MEMORY_LIMIT");
    });

    it("a returned body of endless string chunks is refused at its first chunk, not read until the watchdog", async () => {
      // Its size counted NaN, which passed the output bound: read until the RSS watchdog ended the run.
      const code = 'export default () => new Response(new ReadableStream({ pull(c) { c.enqueue("x".repeat(1 << 16)) } }))';
      const result = failed(await sandbox.run({ code, limits: { maxOutputBytes: 1 << 20 } }));
      expect(result.error).toMatchObject({
        code: "ERR_USER_CODE",
        name: "TypeError",
        message: "a body chunk is not a Uint8Array",
      });
      expect(completed(await sandbox.run({ code: "export default 6" })).value).toBe(6);
    });

    it("a heap bomb is ERR_MEMORY_LIMIT", async () => {
      const code = "export default () => { const a = []; for (;;) a.push(new Array(4096).fill({ x: Math.random() })) }";
      expect(outcome(await sandbox.run({ code, limits: { memoryMb: 32, wallTimeMs: 10_000, cpuTimeMs: 10_000 } }))).toBe(
        "ERR_MEMORY_LIMIT",
      );
    });
  });

  describe("state between calls", () => {
    it("runs with different partition keys never share a function's process", async () => {
      // why: a function's process is kept for the next run of the same code; keyed without the
      // tenant, tenant-b's run of the same code read the file tenant-a's run left in it.
      const code = `let seen = null;
        try { seen = Deno.readTextFileSync("./note"); } catch {}
        Deno.writeTextFileSync("./note", "tenant-a was here");
        export default seen;`;
      expect(completed(await sandbox.run({ code, partitionKey: "tenant-a" })).value).toBeNull();
      const again = completed(await sandbox.run({ code, partitionKey: "tenant-a" }));
      expect(again.stats.warm).toBe(true);
      expect(completed(await sandbox.run({ code, partitionKey: "tenant-b" })).value).toBeNull();
      await expect(sandbox.run({ code, partitionKey: 5 as unknown as string })).rejects.toThrow(/partitionKey must be a string/);
    });

    it("secrets and per-call data never reach the next call of the same function", async () => {
      const code = `let previous;
        export default (input) => {
          const seen = { previous: previous ?? null, global: globalThis.leak ?? null, apiKey: typeof apiKey === "undefined" ? null : apiKey };
          previous = input; globalThis.leak = input; Object.defineProperty(globalThis, "hidden", { value: input, configurable: true });
          return { ...seen, hidden: null };
        }`;
      const first = completed(await sandbox.run({ code, input: "secret-1", globals: { apiKey: "key-1" } }));
      expect(first.value).toEqual({ previous: null, global: null, apiKey: "key-1", hidden: null });
      const second = completed(await sandbox.run({ code, input: "data-2" }));
      expect(second.stats.warm).toBe(true);
      expect(second.value).toEqual({ previous: null, global: null, apiKey: null, hidden: null });
      const third = completed(await sandbox.run({ code: `${code}\nexport const h = () => globalThis.hidden ?? null;` }));
      expect(third.value).toMatchObject({ global: null });
    });

    it("what a run puts on Object.prototype does not change the bindings of the next run in its process", async () => {
      // The runtime's install read `fetch` and a binding's kind through Object.prototype (`in`):
      // the next run got a fetch without a net capability, bound to a host function by number,
      // and its data global became a call to host function 0.
      const code = `export default (input) => {
          const plant = { fetch: 0, f: 0, n: "planted" };
          if (input === "plant") for (const k in plant) Object.defineProperty(Object.prototype, k, { value: plant[k], configurable: true });
          return [Object.getOwnPropertyDescriptor(globalThis, "fetch") !== undefined, typeof data];
        }`;
      const globals = { data: 5, other: async () => "host" };
      expect(completed(await sandbox.run({ code, input: "plant", globals })).value).toEqual([false, "number"]);
      const next = completed(await sandbox.run({ code, input: "look", globals }));
      // Since the reset checks the builtins, a process whose Object.prototype changed is retired.
      expect(next.stats.warm).toBe(false);
      expect(next.value).toEqual([false, "number"]);
    });

    it("a prototype polluted through one caller's input never makes the next caller's run evaluate another script", async () => {
      // A naive deep merge of the input set Object.prototype.script and .filename: the bootstrap
      // read the next run's frame through Object.prototype (a module with imports has no
      // `script`), and evaluated the polluter's script with the next caller's globals.
      const code = `import { format } from "node:util";
        function merge(target, source) {
          for (const key in source) {
            if (typeof source[key] === "object" && source[key] !== null) merge(target[key] ??= {}, source[key]);
            else target[key] = source[key];
          }
          return target;
        }
        export default (input) => format("%s:%s", merge({}, input).name, typeof apiKey);`;
      const script = "(function () { return { default: () => 'forged, saw ' + globalThis.apiKey }; })";
      const attack = { name: "mallory", constructor: { prototype: { filename: "<guest>", script } } };
      expect(completed(await sandbox.run({ code, input: attack })).value).toBe("mallory:undefined");
      const victim = await sandbox.run({ code, input: { name: "alice" }, globals: { apiKey: "alice-secret" } });
      expect(completed(victim).value).toBe("alice:string");
      // The polluted process served no further run.
      expect(victim.stats.warm).toBe(false);
    });

    it("a run that replaces the builtins the reset uses does not keep its globals for the next run", async () => {
      // The reset asked `baseline.has(key)` (Map.prototype.has) whether a global was the bootstrap's.
      const code = `export default (input) => {
          const seen = globalThis.leak ?? null;
          if (input.plant) { globalThis.leak = input.secret; Map.prototype.has = () => true; }
          return seen;
        }`;
      expect(completed(await sandbox.run({ code, input: { plant: true, secret: "secret-1" } })).value).toBe(null);
      expect(completed(await sandbox.run({ code, input: { plant: false } })).value).toBe(null);
      const third = completed(await sandbox.run({ code, input: { plant: false } }));
      expect(third.value).toBe(null);
      expect(third.stats.warm).toBe(true);
    });

    it("a run that hooks typed-array methods never reads the frames of the next run", async () => {
      // The bootstrap's read loop called Uint8Array.prototype.subarray on each frame it read: the
      // hook saw the next run's input and globals.
      const code = `export default (input) => {
          const seen = Object.prototype.stolen ?? null;
          if (input.plant) {
            const original = Uint8Array.prototype.subarray;
            Uint8Array.prototype.subarray = function (from, to) {
              const bytes = original.call(this, from, to);
              const text = new TextDecoder().decode(bytes);
              if (text.includes('"evaluate"')) Object.prototype.stolen = text.includes("alice-secret");
              return bytes;
            };
          }
          return seen;
        }`;
      expect(completed(await sandbox.run({ code, input: { plant: true } })).value).toBe(null);
      const next = completed(await sandbox.run({ code, input: { plant: false }, globals: { apiKey: "alice-secret" } }));
      expect(next.value).toBe(null);
    });

    it("the last match of a run (RegExp.input, RegExp.$1) does not reach the next run", async () => {
      const code = `export default (input) => {
          const seen = [RegExp.input, RegExp.$1];
          if (input.secret) /(.+)/.test(input.secret);
          return seen;
        }`;
      completed(await sandbox.run({ code, input: { secret: "secret-1" } }));
      const next = completed(await sandbox.run({ code, input: {} }));
      expect(next.stats.warm).toBe(true);
      expect(next.value).toEqual(["", ""]);
    });
    it("a function's other modules are evaluated afresh on every run, as its entry is", async () => {
      // why: only the entry got a URL of its own per run; a value one caller's run left in a module
      // of the function's files (./store.ts) was read by the next caller's run in the same process.
      const files = { "lib/store.ts": "export const store: string[] = [];", "lib/use.ts": 'export { store } from "./store.ts";' };
      const code = `import { store } from "./lib/use.ts";
        export default (input) => { const seen = [...store]; if (input) store.push(input); return seen; }`;
      expect(completed(await sandbox.run({ code, files, input: "secret-1" })).value).toEqual([]);
      const second = completed(await sandbox.run({ code, files }));
      expect(second.stats.warm).toBe(true);
      expect(second.value).toEqual([]);
    });

    it("a value a run puts on a node: module object (node:process) retires the process", async () => {
      // why: node: module objects are shared by every run of a process; a value one caller's run
      // put on node:process was read by the next caller's run.
      const code = `import proc from "node:process";
        export default (input) => { const seen = proc.__stash ?? null; if (input) proc.__stash = input; return seen; }`;
      expect(completed(await sandbox.run({ code, input: "secret-1" })).value).toBeNull();
      const second = completed(await sandbox.run({ code }));
      expect(second.stats.warm).toBe(false);
      expect(second.value).toBeNull();
    });

    describe("work a run leaves pending", () => {
      // why: a node:timers interval planted by one run (node:timers reaches Deno's own timers, not
      // cordon's) ran during the next caller's run of the same function, read its apiKey global and
      // wrote it to a file the run after returned. A process with guest work still pending after a
      // run is now retired: the next run is cold.
      const thief = (plant: string) => `${plant}
        export default async (input) => {
          let seen = null; try { seen = Deno.readTextFileSync("./stolen"); } catch {}
          if (input.plant) leave(() => { if (typeof apiKey === "string") Deno.writeTextFileSync("./stolen", apiKey); });
          if (input.wait) await new Promise((r) => setTimeout(r, 500));
          return seen;
        }`;
      const kinds: Record<string, string> = {
        "a node:timers setInterval": `import { setInterval } from "node:timers"; const leave = (f) => setInterval(f, 5);`,
        // One-shot timers wait 400 ms (the second run waits 500): at 50 ms, under CI load the timer
        // had fired before the first run's end was checked, leaving nothing pending (the process
        // was then rightly kept warm, and the test failed).
        "an unref'd node:timers setTimeout": `import { setTimeout } from "node:timers"; const leave = (f) => setTimeout(f, 400).unref();`,
        "a promise chain waiting on node:timers/promises": `import { setTimeout as sleep } from "node:timers/promises"; const leave = (f) => { sleep(400).then(f); };`,
        "a node:worker_threads Worker": `import { Worker } from "node:worker_threads"; const leave = (f) => { new Worker("setInterval(() => {}, 1000)", { eval: true }).on("message", f); };`,
        "a file left open": `const leave = (f) => { Deno.openSync("./held", { write: true, create: true }); };`,
        // Deno's core was reachable as Deno[Deno.internal].core: a guest turned its leak tracing off.
        "an interval started with Deno's leak tracing turned off": `import { setInterval } from "node:timers";
          const core = Deno[Deno.internal]?.core;
          const leave = (f) => { core?.setLeakTracingEnabled(false); setInterval(f, 5); core?.setLeakTracingEnabled(true); };`,
      };
      for (const [kind, plant] of Object.entries(kinds)) {
        it(`${kind} left by one run retires the process: the next caller's data is never read`, async () => {
          const code = thief(plant);
          expect(completed(await sandbox.run({ code, input: { plant: true } })).value).toBeNull();
          const second = completed(await sandbox.run({ code, input: { wait: true }, globals: { apiKey: "alice-secret" } }));
          expect(second.stats.warm).toBe(false);
          expect(completed(await sandbox.run({ code, input: {} })).value).toBeNull();
        });
      }

      it("a run that awaited all it started keeps its process warm (no false positive)", async () => {
        const code = `import { setTimeout as sleep } from "node:timers/promises";
          import { setInterval, clearInterval, setTimeout as later } from "node:timers";
          import { Worker } from "node:worker_threads";
          import proc from "node:process";
          import { EventEmitter } from "node:events";
          import { Buffer } from "node:buffer";
          import { format } from "node:util";
          export default async () => {
            await new Promise((r) => proc.nextTick(r));
            const e = new EventEmitter(); e.on("x", () => {}); e.emit("x");
            format("%s", Buffer.from("a").toString("hex"), proc.cwd(), proc.argv.length);
            await sleep(5);
            await new Promise((r) => later(r, 5));
            await new Promise((r) => { let n = 0; const i = setInterval(() => { if (++n === 2) { clearInterval(i); r(); } }, 2); });
            const file = Deno.openSync("./f", { write: true, create: true }); file.close();
            await Deno.writeTextFile("./g", "x"); await Deno.readTextFile("./g");
            const w = new Worker("require('node:worker_threads').parentPort.postMessage(1)", { eval: true });
            await new Promise((r) => w.once("message", r)); await w.terminate();
            await new Promise((r) => queueMicrotask(r));
            return "ok";
          }`;
        expect(completed(await sandbox.run({ code })).value).toBe("ok");
        const second = completed(await sandbox.run({ code }));
        expect(second.value).toBe("ok");
        expect(second.stats.warm).toBe(true);
      });

      // cordon's own timers and host calls are the host's to end: a run's are cut at its end (no
      // late firing, no late answer is sent), so the process stays warm and the continuation a run
      // left never runs, in the next caller's run or after it.
      const late: Record<string, string> = {
        "a host call still in flight": "const leave = (f) => { slow().then(f); };",
        "a setTimeout of cordon's runtime": "const leave = (f) => { setTimeout(f, 50); };",
        "a setInterval of cordon's runtime": "const leave = (f) => { setInterval(f, 5); };",
      };
      for (const [kind, plant] of Object.entries(late)) {
        it(`${kind} left by one run never runs during the next caller's run`, async () => {
          const code = thief(plant);
          const slow = () => new Promise((resolve) => setTimeout(() => resolve("late"), 50));
          const first = completed(await sandbox.run({ code, input: { plant: true }, globals: { slow, apiKey: "nobody" } }));
          expect(first.value).toBeNull();
          const second = completed(await sandbox.run({ code, input: { wait: true }, globals: { slow, apiKey: "alice-secret" } }));
          expect(second.stats.warm).toBe(true);
          // The answer to the first run's call (or its timer) was due during the second run's wait.
          await new Promise((resolve) => setTimeout(resolve, 150));
          const third = completed(await sandbox.run({ code, input: {}, globals: { slow, apiKey: "nobody" } }));
          expect(third.stats.warm).toBe(true);
          expect(third.value).toBeNull();
        });
      }
    });
  });

  describe("imports", () => {
    it("bare specifiers become npm: (node: for Node builtins); granted and relative ones stay the guest's", () => {
      const local = {
        sourceImports: new Set(["lib/math", "./rel.ts"]),
        hostModules: new Set(["db"]),
        fileUrl: (kind: string, s: string) => `file:///d/${kind}/${s}`,
      };
      expect(rewriteSpecifier("lodash", local)).toBe("npm:lodash");
      expect(rewriteSpecifier("@scope/pkg/sub", local)).toBe("npm:@scope/pkg/sub");
      expect(rewriteSpecifier("fs", local)).toBe("node:fs");
      expect(rewriteSpecifier("fs/promises", local)).toBe("node:fs/promises");
      expect(rewriteSpecifier("node:path", local)).toBe("node:path");
      expect(rewriteSpecifier("npm:chalk@5", local)).toBe("npm:chalk@5");
      expect(rewriteSpecifier("jsr:@std/path", local)).toBe("jsr:@std/path");
      expect(rewriteSpecifier("https://esm.sh/x", local)).toBe("https://esm.sh/x");
      expect(rewriteSpecifier("./rel.ts", local)).toBe("./rel.ts");
      expect(rewriteSpecifier("db", local)).toBe("file:///d/h/db");
      expect(rewriteSpecifier("lib/math", local)).toBe("file:///d/i/lib/math");
    });

    it("the parser finds the specifiers; only import positions are rewritten", async () => {
      const code =
        'import a from "lodash";\nexport * from "fs";\nconst s = "lodash";\nconst m = await import("lodash");\nexport { a, s, m };\n';
      expect((await importSpecifiers(code)).sort()).toEqual(["fs", "lodash"]);
      const map = new Map([
        ["lodash", "npm:lodash"],
        ["fs", "node:fs"],
      ]);
      expect(await replaceSpecifiers(code, map)).toBe(
        'import a from "npm:lodash";\nexport * from "node:fs";\nconst s = "lodash";\nconst m = await import("npm:lodash");\nexport { a, s, m };\n',
      );
      // Import syntax inside the guest's strings, templates, comments and regular expressions is
      // its data: rewritten, it handed the guest the private directory's path. (A pattern over
      // the text rewrote every one of these.)
      const data = [
        `const a = 'import x from "lodash"';`,
        'const b = `export * from "fs"`;',
        '// import("lodash")',
        '/* from "fs" */',
        'const c = /from "lodash"/.source;',
        "const d = 1 / 2 / 3; const e = 'import(\"fs\")';",
        'import q from "lodash";',
        "export { a, b, c, d, e, q };",
      ].join("\n");
      const out = await replaceSpecifiers(data, map);
      expect(out).toBe(data.replace('import q from "lodash";', 'import q from "npm:lodash";'));
      // A single-quoted specifier (the guest's own text, not esbuild's) keeps valid syntax.
      expect(await replaceSpecifiers("import x from 'fs'; export { x };", map)).toBe('import x from "node:fs"; export { x };');
    });

    it("a multi-file source: files beside the entry, TypeScript included", async () => {
      const files = {
        "lib/math.ts": "export const square = (x: number): number => x * x;",
        "lib/index.js": "export { square } from './math.ts'; export const twice = (x) => x * 2;",
      };
      const code = "import { square, twice } from './lib/index.js';\nexport default (n: number) => twice(square(n));";
      expect(completed(await sandbox.run({ code, input: 3, files })).value).toBe(18);
      const thrown = failed(
        await sandbox.run({
          code: "import { boom } from './lib/err.ts';\nexport default () => boom()",
          files: { "lib/err.ts": "export function boom() {\n  throw new Error('deep');\n}" },
        }),
      );
      expect(thrown.error.stack).toContain("./lib/err.ts:2");
      await expect(sandbox.run({ code: "export default 1", files: { "../x.js": "" } })).rejects.toThrow(/relative path/);
      const many = Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`f${i}.js`, ""]));
      await expect(sandbox.run({ code: "export default 1", files: many })).rejects.toThrow(/at most 256/);
    });
  });
});

describe("the deno engine's lifecycle", () => {
  it("leaves no process behind after dispose", async () => {
    const sandbox = await createSandbox({ engine: "deno", spareInstances: 2 });
    await sandbox.run({ code: "export default 1" });
    await using_prefix(sandbox);
    // A process still starting has no pid yet (the spawner process's answer is on its way).
    await until(() => (sandbox.stats().workers ?? []).every((w) => w.pid > 0));
    const pids = (sandbox.stats().workers ?? []).map((w) => w.pid);
    expect(pids.length).toBeGreaterThanOrEqual(2);
    await sandbox.dispose();
    for (const pid of pids) expect(alive(pid), `pid ${pid}`).toBe(false);
  });

  it("idle function processes end after their TTL; past the soft cap the least recently used idle one ends", async () => {
    await using sandbox = await createSandbox({ engine: "deno", spareInstances: 0, deno: { idleTtlMs: 400, softCap: 2 } });
    for (const n of [1, 2, 3]) completed(await sandbox.run({ code: `export default ${n}` }));
    await new Promise((r) => setTimeout(r, 100));
    expect(functionPids(sandbox).length).toBeLessThanOrEqual(2);
    // After the TTL (polled for: a loaded machine runs the TTL's timer late).
    await until(() => functionPids(sandbox).length === 0, 5000);
    expect(functionPids(sandbox)).toEqual([]);
  });

  it("a spare killed from outside is never handed a run", async () => {
    await using sandbox = await createSandbox({ engine: "deno", spareInstances: 1 });
    completed(await sandbox.run({ code: "export default 0" }));
    await new Promise((r) => setTimeout(r, 1000));
    const spare = (sandbox.stats().workers ?? []).find((w) => w.partition === "");
    expect(spare).toBeDefined();
    process.kill(spare?.pid ?? 0, "SIGKILL");
    await new Promise((r) => setTimeout(r, 100));
    expect(completed(await sandbox.run({ code: "export default 3" })).value).toBe(3);
  });

  it("a function process is retired after maxInvocations runs", async () => {
    await using sandbox = await createSandbox({ engine: "deno", spareInstances: 0, deno: { maxInvocations: 2 } });
    const code = "export default () => 1";
    const warm = [];
    for (let i = 0; i < 4; i++) warm.push(completed(await sandbox.run({ code })).stats.warm);
    expect(warm).toEqual([false, true, false, true]);
  });

  it("a warm prefix's process is replaced after maxInvocations uses; its runs and calls go on", async () => {
    await using sandbox = await createSandbox({ engine: "deno", spareInstances: 0, deno: { maxInvocations: 3 } });
    await using prefix = await sandbox.prepare({ code: "globalThis.base = 40; export const add = (n) => base + n" });
    const outcomes = [];
    for (let i = 0; i < 7; i++) {
      const result =
        i % 2 ? await prefix.run({ code: "export default () => base + 2" }) : await prefix.call({ export: "add", args: [2] });
      outcomes.push([completed(result).value, result.stats.warm]);
    }
    // The prepare counted as the first use: the 3rd and 6th uses start a new process, cold.
    expect(outcomes.map(([v]) => v)).toEqual([42, 42, 42, 42, 42, 42, 42]);
    expect(outcomes.map(([, warm]) => warm)).toContain(false);
  });
});

async function using_prefix(sandbox: Sandbox): Promise<void> {
  const prefix = await sandbox.prepare({ code: "export const f = () => 1" });
  completed(await prefix.call({ export: "f" }));
}
