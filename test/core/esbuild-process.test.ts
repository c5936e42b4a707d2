import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { firstErrorText, withEsbuild } from "../../src/core/esbuild-calls.js";
import { EsbuildClientLost, EsbuildProcess, FatalLine } from "../../src/core/esbuild-process.js";
import { normalizeSource } from "../../src/core/source.js";
import { createSandbox } from "../../src/index.js";
import { type Descendant, descendants, esbuildServices, running, until, workerPids } from "../helpers/processes.js";

/**
 * esbuild's JavaScript client runs in a child process of its own: whatever it does there (throw
 * inside its own pipe handler, where no caller can catch it) ends at most that process, never the host.
 */

/** Waits until at most one esbuild service is left (the current client's), live; returns them. */
async function settledEsbuildServices(): Promise<Descendant[]> {
  const until = performance.now() + 10_000;
  let found = esbuildServices();
  while (performance.now() < until && (found.length > 1 || found.some(({ state }) => state === "Z"))) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    found = esbuildServices();
  }
  return found;
}

const transform = (code: string) => withEsbuild({ kind: "transform", code, options: { loader: "ts", logLevel: "silent" } });

describe("esbuild's client runs in a process of its own", () => {
  it("esbuild's errors about the text cross to the host with their `errors` intact", async () => {
    const failed = await transform("let a = ;").catch((error: unknown) => error);
    expect(firstErrorText(failed)).toBe('Unexpected ";"');
    expect((failed as { errors: { location: { line: number } }[] }).errors[0].location.line).toBe(1);
    expect((await transform("let a: number = 1")).code).toBe("let a = 1;\n");
  });

  it("an output past V8's longest string fails its call with ERR_COMPILE; the host and later calls go on", async () => {
    // No nesting scan here (withEsbuild directly): 5 × 8,000 nested blocks print as 640 M
    // characters, past the 2^29-24 of one string. esbuild's client threw that inside its pipe
    // handler, where nothing caught it: on the host's thread it ended the process (this test).
    const blocks = `${"{".repeat(8000)}${"}".repeat(8000)}\n`.repeat(5);
    const before = transform("export const before: number = 1");
    // 110 s, not the default 60: under CI load ~5 printing 640 M characters outlasted 60 s once.
    const printed = withEsbuild({ kind: "transform", code: blocks, options: {} }, { timeoutMs: 110_000 });
    await expect(printed).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(
        /^<guest>: the compiled module is too large to read back from esbuild .*ERR_STRING_TOO_LONG/,
      ),
    });
    expect((await before).code).toContain("before = 1");
    expect((await normalizeSource("export default 2 as number;", "after.ts")).code).toContain("= 2");
    // The failed client's service process ended and was reaped: only the new client's is left.
    const left = await settledEsbuildServices();
    expect(left).toHaveLength(1);
    expect(left[0].state).not.toBe("Z");
  }, 120_000);

  it("many transforms at once each get their own output; an aborted one beside them ends only itself", async () => {
    const controller = new AbortController();
    // 40,000 duplicate declarations keep esbuild busy for more than a minute (compile-bound.test.ts).
    const costly = withEsbuild(
      { kind: "transform", code: "let a;\n".repeat(40_000), options: { logLevel: "silent" } },
      { timeoutMs: 60_000, signals: [controller.signal], filename: "costly.js" },
    );
    const many = Array.from({ length: 100 }, (_, i) => transform(`export const v${i}: number = ${i};`));
    setTimeout(() => controller.abort(), 100);
    const started = performance.now();
    await expect(costly).rejects.toMatchObject({ code: "ERR_ABORTED" });
    expect(performance.now() - started).toBeLessThan(5_000);
    const outputs = await Promise.all(many);
    outputs.forEach((out, i) => {
      expect(out.code).toBe(`export const v${i} = ${i};\n`);
    });
    // Later calls go to a new service; the abandoned one is stopped with its process.
    expect((await transform("export const later: number = 3")).code).toContain("later = 3");
    const left = await settledEsbuildServices();
    expect(left).toHaveLength(1);
    expect(left[0].state).not.toBe("Z");
  });
});

describe("V8's fatal line in a dying client's stderr", () => {
  const fatal = "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory";
  // Longer than the 2 KB of stderr kept, as V8's was once (21 frames: the heap ran out while
  // Node loaded its crypto binding).
  const stack = Array.from(
    { length: 40 },
    (_, i) => ` ${i}: 0x10e91f1 v8::internal::Heap::SomeFunction(int) [/usr/bin/node]`,
  ).join("\n");
  const read = (...chunks: string[]) => {
    const stderr = new FatalLine();
    for (const chunk of chunks) stderr.feed(chunk);
    return stderr.line;
  };

  it("is kept when the stack trace after it is longer than the end kept", () => {
    expect(stack.length).toBeGreaterThan(2_048);
    expect(read(`\n<--- Last few GCs --->\n${fatal}\n${stack}\n`)).toBe(fatal);
    expect(read("<--- JS stacktrace --->\n", `${fatal}\n`, stack, "\n")).toBe(fatal);
  });

  it("is found when split across chunks, or cut short by the exit", () => {
    expect(read("FATAL ERR", "OR: Reached heap limit Allocation", ` failed - JavaScript heap out of memory\n${stack}`)).toBe(
      fatal,
    );
    expect(read(`${stack}\n`, fatal)).toBe(fatal);
    expect(read("FATAL ERROR: Reached heap li")).toBe("FATAL ERROR: Reached heap li");
  });

  it("is absent when the client said nothing fatal", () => {
    expect(read(stack, "\nwarning: something\n")).toBeUndefined();
  });
});

describe("esbuild's client process", () => {
  it("is the host's child, with esbuild's service under it, and none of the host's environment", async () => {
    process.env.CORDON_TEST_SECRET = "hunter2";
    try {
      await transform("export const seen: number = 1");
      const [service] = await settledEsbuildServices();
      const client = descendants().find((each) => each.pid === service.ppid);
      expect(client?.ppid).toBe(process.pid);
      expect(client?.comm).toBe("node");
      expect(readFileSync(`/proc/${client?.pid}/environ`, "utf8")).not.toContain("hunter2");
    } finally {
      delete process.env.CORDON_TEST_SECRET;
    }
  });

  it("killed from outside, fails nothing later: its service goes with it, and the next call gets a new client", async () => {
    await transform("export const first: number = 1");
    const [service] = await settledEsbuildServices();
    const client = descendants().find((each) => each.pid === service.ppid);
    process.kill(client?.pid as number, "SIGKILL");
    await until(() => !esbuildServices().some((each) => each.pid === service.pid && each.state !== "Z"));
    // Sent before the host saw the client end, a call fails over to a client of its own.
    expect((await transform("export const next: number = 2")).code).toContain("next = 2");
    expect((await transform("export const then: number = 3")).code).toContain("then = 3");
    const left = await settledEsbuildServices();
    expect(left).toHaveLength(1);
    expect(left[0].pid).not.toBe(service.pid);
    expect(running(client?.pid as number)).toBe(false);
  });

  it("out of heap (V8 aborts it), fails only the calls it held, with V8's words", async () => {
    // A 16 MB heap cannot hold four copies of TypeScript's 9 MB compiler on their way to esbuild:
    // on a worker thread this limit aborted the whole host process (Node #47224). One copy ran out
    // too, but not always: once in CI it fitted (V8 checks the limit only when it collects).
    // V8's stack trace after its fatal line is longer than the stderr the host keeps: the line
    // must be kept anyway for the message to say "heap".
    const small = new EsbuildProcess(16);
    const code = readFileSync(createRequire(import.meta.url).resolve("typescript/lib/typescript.js"), "utf8").repeat(4);
    const failed = await small.call(small.newService(), { kind: "transform", code, options: {} }).catch((error) => error);
    expect(failed).toBeInstanceOf(EsbuildClientLost);
    expect(failed).toMatchObject({ tooLarge: true, held: 1 });
    expect((failed as Error).message).toMatch(/heap/i);
    expect(small.lost).toBe(true);
    // Its service process went with it; the shared client still answers.
    expect((await transform("export const after: number = 3")).code).toContain("after = 3");
    expect(await settledEsbuildServices()).toHaveLength(1);
  });

  it("that dies holding a call fails it even in a host with nothing else to wait for", async () => {
    // The client's channel closes before its 'exit': with only the channel held, such a host's
    // loop ran dry first and Node ended it with the call never settled (exit code 13).
    const entry = fileURLToPath(new URL("../../dist/core/esbuild-process.js", import.meta.url));
    const script = `const { EsbuildProcess } = await import(${JSON.stringify(entry)});
      const small = new EsbuildProcess(16);
      const code = "export const s = '" + "x".repeat(36_000_000) + "';";
      const failed = await small.call(small.newService(), { kind: "transform", code, options: {} }).catch((error) => error);
      console.log(failed.constructor.name, failed.tooLarge);`;
    const host = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    host.stdout.on("data", (chunk: Buffer) => {
      out += chunk;
    });
    const [code] = await once(host, "exit");
    expect({ code, out: out.trim() }).toEqual({ code: 0, out: "EsbuildClientLost true" });
  });

  it("is not started in a process host's worker: the worker is the boundary, and runs its client on a thread", async () => {
    await using sandbox = await createSandbox({ engine: "quickjs", host: "process" });
    // QuickJS minifies cordon's runtime with esbuild in the worker, and a source import compiles there.
    const result = await sandbox.run({
      code: `import { n } from "./n.ts"; export default n;`,
      imports: { "./n.ts": "export const n: number = 4;" },
    });
    expect(result.ok && result.value).toBe(4);
    const [worker] = workerPids(sandbox);
    const under = descendants(worker);
    expect(under.map((each) => each.comm)).toContain("esbuild");
    expect(under.filter((each) => each.comm === "node")).toEqual([]);
  });

  it("goes, with esbuild's processes, when the host is killed", async () => {
    const entry = fileURLToPath(new URL("../../dist/index.js", import.meta.url));
    const script = `const { createSandbox } = await import(${JSON.stringify(entry)});
      const sandbox = await createSandbox({ engine: "quickjs", host: "inprocess" });
      const result = await sandbox.run({ code: "export default (1 as number)", filename: "typed.ts" });
      console.log(result.ok && result.value);
      setInterval(() => {}, 1000);`;
    const host = spawn(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const [line] = (await once(host.stdout, "data")) as [Buffer];
    expect(line.toString().trim()).toBe("1");
    const under = descendants(host.pid);
    expect(under.filter((each) => each.comm === "esbuild")).toHaveLength(1);
    host.kill("SIGKILL");
    await once(host, "exit");
    // Nothing left of what the host started: the client saw its channel close and killed its group.
    await until(() => under.every((each) => !running(each.pid)), 10_000);
  });
});
