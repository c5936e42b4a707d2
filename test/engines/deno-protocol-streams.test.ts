import { readdirSync, readlinkSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { completed } from "../conformance/results.js";

/**
 * The streams the frames of a Deno process cross are not the guest's to read or write. Before: a
 * read of `Deno.stdin` left pending by one call took the next call's frame (its arguments), and
 * that call ended ERR_WALL_TIMEOUT.
 */
const PREFIX = `
  import fs from "node:fs";
  import process from "node:process";
  const seen = [];
  const text = (b, n) => new TextDecoder().decode(new Uint8Array(b.buffer, 0, n));
  const note = (what) => (value) => seen.push(what + ": " + value);
  const pending = {
    denoRead() {
      const b = new Uint8Array(1 << 16);
      Deno.stdin.read(b).then((n) => seen.push(n === null ? "eof" : text(b, n)), note("error"));
    },
    denoReadable() {
      Deno.stdin.readable.getReader().read().then((r) => seen.push(r.done ? "eof" : new TextDecoder().decode(r.value)), note("error"));
    },
    fsRead() {
      const b = new Uint8Array(1 << 16);
      fs.read(0, b, 0, b.length, null, (e, n) => seen.push(e ? "error: " + e.code : text(b, n)));
    },
    fsStream() {
      fs.createReadStream(null, { fd: 0 }).on("data", (d) => seen.push(String(d))).on("error", note("error"));
    },
    processStdin() {
      process.stdin.on("data", (d) => seen.push(String(d))).on("error", note("error"));
    },
  };
  export function grab(route) { pending[route](); return "started"; }
  export function readSync() {
    const b = new Uint8Array(1 << 16);
    try { return "read " + text(b, fs.readSync(0, b)); } catch (e) { return "error " + e.code; }
  }
  export function open(path) {
    try { Deno.openSync(path); return "opened"; } catch (e) { return e.name; }
  }
  export function openWrite(path) {
    try { Deno.openSync(path, { write: true }); return "opened"; } catch (e) { return e.name; }
  }
  export async function openInWorker(path) {
    const { Worker } = await import("node:worker_threads");
    const worker = new Worker(
      "const { parentPort, workerData } = require('node:worker_threads');" +
        "try { Deno.openSync(workerData); parentPort.postMessage('opened'); } catch (e) { parentPort.postMessage(e.name); }",
      { eval: true, workerData: path },
    );
    return await new Promise((resolve) => worker.once("message", resolve).once("error", (e) => resolve("error " + e.message)));
  }
  export async function ask(path) {
    const read = await Deno.permissions.request({ name: "read", path });
    const write = await Deno.permissions.request({ name: "write", path });
    return [read.state, write.state];
  }
  export function startFrame() {
    // A frame's length (4096 bytes) and nothing else: whatever followed on the stream was its body.
    Deno.stdout.writeSync(new Uint8Array([0, 0, 16, 0]));
    return "written";
  }
  export function openNode(path) {
    try { fs.openSync(path, "r"); return "opened"; } catch (e) { return e.name; }
  }
  export function otherFds() {
    const codes = new Set();
    for (let fd = 3; fd < 64; fd++) {
      try { fs.readSync(fd, new Uint8Array(1)); codes.add("read " + fd); } catch (e) { codes.add(e.code); }
      try { fs.writeSync(fd, "x"); codes.add("wrote " + fd); } catch (e) { codes.add(e.code); }
    }
    return [...codes];
  }
  export const echo = (x) => x;
  export const look = () => seen;
  export const pid = () => Deno.pid;
`;

describe("deno: the protocol's frames are not the guest's to read or write", () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ engine: "deno" });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  for (const route of ["denoRead", "denoReadable", "fsRead", "fsStream", "processStdin"]) {
    it(`a read of the process's stdin left pending (${route}) gets no frame of the next call`, async () => {
      const prefix = await sandbox.prepare({ code: PREFIX });
      expect(completed(await prefix.call({ export: "grab", args: [route] })).value).toBe("started");
      const secret = `secret-of-next-call-${route}`;
      const echoed = await prefix.call({ export: "echo", args: [secret], limits: { wallTimeMs: 3000 } });
      expect(completed(echoed).value).toBe(secret);
      const seen = completed(await prefix.call({ export: "look" })).value as string[];
      expect(seen.join("\n")).not.toContain("secret");
      await prefix.dispose();
    }, 20_000);
  }

  it("a setter the guest put on Object.prototype takes no field of the host's frames, short or long", async () => {
    // Settles cross as text frames (their text after a JSON header): the runtime sets the text on
    // the parsed header, which must not meet a setter the guest defined for "text".
    const long = "L".repeat(200_000);
    const result = await sandbox.run({
      code: `export default async () => {
        const taken = [];
        for (const name of ["text", "callId", "ok", "t"]) {
          Object.defineProperty(Object.prototype, name, { set(v) { taken.push(name); }, get() { return "forged"; }, configurable: true });
        }
        const short = await answer("short");
        const longer = await answer("long");
        return { short, long: longer.length, taken };
      }`,
      globals: { answer: async (kind: string) => (kind === "short" ? "the host's" : long) },
    });
    expect(completed(result).value).toEqual({ short: "the host's", long: long.length, taken: [] });
  }, 20_000);

  it("a guest that replaces Function.prototype.call fails its run with an error that says so, and the next run is served", async () => {
    // Deno's own FsFile.read calls the live `call`: replaced, the read of the host's frames
    // returned null, which ended the process as if the host had gone (ERR_INSTANCE_RESET).
    const result = await sandbox.run({
      code: "export default async () => { Function.prototype.call = function () { return 0 }; await new Promise((r) => setTimeout(r, 10)); return 1 }",
      limits: { wallTimeMs: 5000 },
    });
    expect(result.ok ? "completed" : `${result.error.code}: ${result.error.message}`).toBe(
      "ERR_USER_CODE: Function.prototype.call was replaced: Deno's own I/O needs it, and this process cannot go on",
    );
    expect(completed(await sandbox.run({ code: "export default () => 2" })).value).toBe(2);
  }, 20_000);

  it("a synchronous read of fd 0 (node:fs readSync) neither blocks the process nor returns a frame", async () => {
    const prefix = await sandbox.prepare({ code: PREFIX });
    const result = await prefix.call({ export: "readSync", limits: { wallTimeMs: 3000 } });
    expect(completed(result).value).toBe("read ");
    expect(completed(await prefix.call({ export: "echo", args: ["next"] })).value).toBe("next");
    await prefix.dispose();
  }, 20_000);

  it("the start of a frame written to stdout swallows none of the next call's frames", async () => {
    const prefix = await sandbox.prepare({ code: PREFIX });
    expect(completed(await prefix.call({ export: "startFrame" })).value).toBe("written");
    const echoed = await prefix.call({ export: "echo", args: ["next"], limits: { wallTimeMs: 3000 } });
    expect(completed(echoed).value).toBe("next");
    await prefix.dispose();
  }, 20_000);

  it("node:fs reaches no descriptor by number but 0, 1 and 2 (EBADF)", async () => {
    const prefix = await sandbox.prepare({ code: PREFIX });
    expect(completed(await prefix.call({ export: "otherFds" })).value).toEqual(["EBADF"]);
    expect(completed(await prefix.call({ export: "echo", args: ["next"] })).value).toBe("next");
    await prefix.dispose();
  }, 20_000);

  it("no path to the protocol streams opens: /dev/stdin, /proc/self/fd/*, /dev/fd/*, the FIFO's own path", async () => {
    const prefix = await sandbox.prepare({ code: PREFIX });
    const pid = completed(await prefix.call({ export: "pid" })).value as number;
    // The host side sees where the process's descriptors lead: every one of them is tried by path.
    const fds = readdirSync(`/proc/${pid}/fd`);
    const targets = fds.map((fd) => readlinkSync(`/proc/${pid}/fd/${fd}`)).filter((t) => t.startsWith("/"));
    // The FIFOs the frames cross (process.ts) are among them, by their paths.
    expect(new Set(targets.filter((t) => /\/frames-(in|out)$/.test(t))).size).toBe(2);
    const paths = [
      "/dev/stdin",
      "/dev/stdout",
      ...fds.flatMap((fd) => [`/proc/self/fd/${fd}`, `/dev/fd/${fd}`, `/proc/${pid}/fd/${fd}`]),
      ...new Set(targets.filter((t) => !t.startsWith("/dev/null") && !t.includes("/fn/"))),
    ];
    for (const path of paths) {
      for (const how of ["open", "openWrite", "openNode"]) {
        const result = completed(await prefix.call({ export: how, args: [path] })).value;
        expect([how, path, result]).toEqual([how, path, "NotCapable"]);
      }
    }
    // Nor can the permissions the bootstrap revoked be asked for again (--no-prompt).
    for (const fifo of new Set(targets.filter((t) => /\/frames-(in|out)$/.test(t)))) {
      expect(completed(await prefix.call({ export: "ask", args: [fifo] })).value).toEqual(["denied", "denied"]);
      // A worker the guest starts gets the permissions as they are now, not as Deno started.
      expect(completed(await prefix.call({ export: "openInWorker", args: [fifo] })).value).toBe("NotCapable");
    }
    expect(completed(await prefix.call({ export: "echo", args: ["still served"] })).value).toBe("still served");
    await prefix.dispose();
  }, 60_000);
});
