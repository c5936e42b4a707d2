import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DenoProcess, type EndCause } from "../../src/engines/deno/process.js";
import { denoBinary } from "../../src/engines/deno/script.js";

/** How a Deno process's end is told to its instance: what it wrote before, and what ended it. */
describe("deno: a process's end", () => {
  const cacheDir = mkdtempSync(join(tmpdir(), "cordon-deno-end-"));
  afterAll(() => rmSync(cacheDir, { recursive: true, force: true }));

  async function started(): Promise<{
    process: DenoProcess;
    frames: string[];
    ended: Promise<[string, boolean, EndCause | undefined, number]>;
  }> {
    const process = await DenoProcess.start({ binary: denoBinary() as string, memoryMb: 128, importHosts: [], cacheDir });
    const frames: string[] = [];
    process.onMessage = (message) => {
      frames.push(String(message.t));
    };
    const ended = new Promise<[string, boolean, EndCause | undefined, number]>((resolve) => {
      process.onExit = (reason, outOfMemory, cause) => resolve([reason, outOfMemory, cause, frames.length]);
    });
    await process.ready;
    return { process, frames, ended };
  }

  // why: a kill's reason may quote a frame (a protocol error names an unknown frame's type), and
  // its text decided ERR_MEMORY_LIMIT: a frame typed "over its memory limit" would have said so.
  it("only the host's own limit makes it out of memory or over its disk, never the words of its reason", async () => {
    const quoted = await started();
    quoted.process.kill('protocol error: an unknown frame "over its memory limit (resident 999 MB) heap limit"');
    const [reason, outOfMemory, cause] = await quoted.ended;
    expect([reason, outOfMemory, cause]).toEqual([
      'protocol error: an unknown frame "over its memory limit (resident 999 MB) heap limit"',
      false,
      undefined,
    ]);
    const memory = await started();
    memory.process.kill("over its memory limit (resident 300 MB)", "memory");
    expect((await memory.ended).slice(1, 3)).toEqual([true, "memory"]);
    const disk = await started();
    disk.process.kill("over its disk limit (a file)", "disk");
    expect((await disk.ended).slice(1, 3)).toEqual([false, "disk"]);
  }, 60_000);

  // why: its exit comes through another channel than its frames: the host could see the exit
  // first, and fail the run as reset though the process had said why it ended (a guest that
  // replaced Function.prototype.call: ERR_INSTANCE_RESET instead of its error, once in a clean run).
  it("what it wrote before it exited by itself is read before its exit is told", async () => {
    for (const paused of [false, true]) {
      const { process, frames, ended } = await started();
      // Its FIFO's reads stopped (libuv's own, below the stream, which would buffer them), the
      // exit's channel wins the race for certain: the frames reach the host only if it reads them
      // at the exit.
      if (paused) (process as unknown as { output: { _handle: { readStop(): void } } }).output._handle.readStop();
      process.send({
        t: "evaluate",
        work: 1,
        bindingsText: '{"globals":{},"modules":{}}',
        mode: "run",
        inputText: '{"$":"u"}',
        caps: [1 << 20, 1000, 1 << 20, 1 << 20],
        reset: false,
        script:
          '(function () { return { default: () => { for (let i = 0; i < 50; i++) console.log("line " + i); Deno.exit(0) } }; })',
        filename: "<exits>",
      });
      const [reason, , , framesBefore] = await ended;
      expect(reason).toBe("the Deno process exited (code 0)");
      expect(frames.slice(0, framesBefore).filter((t) => t === "log")).toHaveLength(50);
    }
  }, 60_000);
});
