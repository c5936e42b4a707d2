import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import type { HostRequest } from "../../src/core/protocol.js";
import { encodeTextFrame } from "../../src/core/framing.js";
import { CallBatch, type CallMessage, callsOfRequest } from "../../src/hosts/process/call-batch.js";
import { createSandbox } from "../../src/index.js";

const call = (id: number, argsText: string, more: Partial<CallMessage> = {}): CallMessage => ({
  t: "prefix-call",
  id,
  prefix: 1,
  path: "f",
  argsText,
  ...more,
});
const tickEnds = () => new Promise((resolve) => setImmediate(resolve));

function batch() {
  const written: HostRequest[] = [];
  return { written, calls: new CallBatch((message) => written.push(message)) };
}

describe("the sandbox's calls of one tick to a worker (CallBatch)", () => {
  it("writes them as one prefix-calls frame when the tick ends; the worker reads back the same calls", async () => {
    const { written, calls } = batch();
    const sent = [call(1, " [1]"), call(2, ' ["\\u0001"]'), call(3, " [3]")];
    for (const message of sent) calls.add(message);
    expect(written).toEqual([]);
    await tickEnds();
    expect(written).toHaveLength(1);
    expect(callsOfRequest(written[0] as Extract<HostRequest, { t: "prefix-calls" }>)).toEqual(sent);
  });

  it("starts a new frame for another prefix or export, keeping order; a lone call stays a prefix-call", async () => {
    const { written, calls } = batch();
    calls.add(call(1, "[1]"));
    calls.add(call(2, "[2]", { path: "g" }));
    calls.add(call(3, "[3]", { path: "g" }));
    calls.add(call(4, "[4]", { prefix: 2, path: "g" }));
    await tickEnds();
    expect(written.map((m) => [m.t, "ids" in m ? m.ids : (m as CallMessage).id])).toEqual([
      ["prefix-call", 1],
      ["prefix-calls", [2, 3]],
      ["prefix-call", 4],
    ]);
  });

  it("long arguments of several calls go to writeJoined as texts, not joined, in the calls' order", async () => {
    const written: HostRequest[] = [];
    const joined: [unknown, string[]][] = [];
    const calls = new CallBatch(
      (message) => written.push(message),
      (header, texts) => joined.push([header, texts]),
    );
    const long = (n: number) => ` ["${String(n).repeat(10_000)}"]`;
    calls.add(call(1, "[1]"));
    calls.add(call(2, long(2)));
    calls.add(call(3, long(3)));
    calls.add(call(4, "[4]", { path: "g" }));
    await tickEnds();
    // The first run of calls was 20,000+ characters: its texts as they are; the lone call after
    // it, a prefix-call frame.
    expect(joined).toEqual([[{ t: "prefix-calls", ids: [1, 2, 3], prefix: 1, path: "f" }, ["[1]", long(2), long(3)]]]);
    expect(written).toEqual([call(4, "[4]", { path: "g" })]);
    // Without a writeJoined, such calls are joined and written as one request.
    const plain = batch();
    for (const message of [call(1, long(1)), call(2, long(2))]) plain.calls.add(message);
    await tickEnds();
    expect(plain.written).toEqual([
      { t: "prefix-calls", ids: [1, 2], prefix: 1, path: "f", argsText: `${long(1)}\u0001${long(2)}` },
    ]);
  });

  it("takes only plain calls: not ones carrying limits, an abort signal, a poll hint or long arguments", () => {
    expect(CallBatch.takes(call(1, "[1]"))).toBe(true);
    expect(CallBatch.takes(call(1, "[1]", { limits: {} as never }))).toBe(false);
    expect(CallBatch.takes(call(1, "[1]", { abortable: true }))).toBe(false);
    expect(CallBatch.takes(call(1, "[1]", { poll: true }))).toBe(false);
    expect(CallBatch.takes(call(1, `["${"x".repeat(70_000)}"]`))).toBe(false);
    expect(CallBatch.takes({ t: "stats", id: 0 })).toBe(false);
  });

  it("refuses a prefix-calls request whose ids and arguments do not line up", () => {
    const request = (ids: unknown, argsText: unknown) =>
      callsOfRequest({ t: "prefix-calls", ids, prefix: 1, path: "f", argsText } as never);
    expect(request([1, 2], "[1]\u0001[2]")).toHaveLength(2);
    expect(request([1, 2], "[1]")).toBeUndefined();
    expect(request([1], "[1]")).toBeUndefined();
    expect(request([1, 1.5], "[1]\u0001[2]")).toBeUndefined();
    expect(request("1,2", "[1]\u0001[2]")).toBeUndefined();
    expect(request([1, 2], 7)).toBeUndefined();
  });

  it("a real worker given a malformed prefix-calls request stops with a protocol error", async () => {
    const main = fileURLToPath(new URL("../../dist/hosts/process/worker-main.js", import.meta.url));
    const config = {
      engine: "v8",
      engineOptions: {
        memoryMb: 64,
        spares: 0,
        budgetBytes: 1 << 26,
        coalesceAbove: 2,
        maxInstances: 2,
        maxQueued: 100,
        busyPollMs: 0,
      },
      pipePollMs: 0,
      rss: { slackBytes: 1 << 28 },
    };
    const child = spawn(process.execPath, ["--no-node-snapshot", main, JSON.stringify(config)], { stdio: "pipe" });
    let stderr = "";
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    // Ready first (its first frame), then the request.
    await new Promise((resolve) => child.stdout.once("data", resolve));
    child.stdin.write(encodeTextFrame({ t: "prefix-calls", ids: [1, 2], prefix: 1, path: "f", argsText: "[1]" }));
    expect(await exited).toBe(70);
    expect(stderr).toMatch(/protocol error: a prefix-calls request whose ids and arguments do not line up/);
  });
});

describe("calls in one tick on the process host", () => {
  it("each caller gets the answer to its own arguments", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "process" });
    try {
      const prefix = await sandbox.prepare({ code: "export function twice(n) { return n * 2 }" });
      await prefix.call({ export: "twice", args: [0] });
      const results = await Promise.all(Array.from({ length: 40 }, (_, i) => prefix.call({ export: "twice", args: [i] })));
      expect(results.map((r) => (r.ok ? r.value : r.error.code))).toEqual(Array.from({ length: 40 }, (_, i) => i * 2));
      // Arguments long enough to be written into their frame one by one (CallBatch.writeJoined).
      const long = await Promise.all(
        Array.from({ length: 6 }, (_, i) => prefix.call({ export: "twice", args: [`${i}`.padStart(9_000, "0")] })),
      );
      expect(long.map((r) => (r.ok ? r.value : r.error.code))).toEqual(Array.from({ length: 6 }, (_, i) => i * 2));
    } finally {
      await sandbox.dispose();
    }
  });
});
