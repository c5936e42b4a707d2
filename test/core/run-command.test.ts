import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runCommand } from "../../src/core/run-command.js";
import { spawnerReady, useSpawner } from "../../src/core/spawner.js";

/**
 * Short commands cordon runs to their end (mkfifo, the Deno seed's checkpoint) go through the
 * spawner process when one runs, so the host is not forked for them; directly otherwise.
 */
const SH = "/bin/sh";
/** Prints its parent's pid on stderr and exits 3. */
const PARENT_AND_EXIT = ["-c", "echo $PPID >&2; exit 3"];

describe.each([
  ["directly", false],
  ["through the spawner process", true],
])("runCommand, %s", (_name, throughSpawner) => {
  async function run<T>(work: (helper: number | undefined) => Promise<T>): Promise<T> {
    if (!throughSpawner) return work(undefined);
    const release = useSpawner();
    try {
      const helper = await spawnerReady();
      expect(helper).toBeGreaterThan(0);
      return await work(helper);
    } finally {
      release();
    }
  }

  it("gives the exit code and stderr, and the command is the spawner's child when it runs", async () => {
    await run(async (helper) => {
      const outcome = await runCommand(SH, PARENT_AND_EXIT, { env: {}, timeoutMs: 10_000 });
      expect(outcome.code).toBe(3);
      expect(outcome.signal).toBeNull();
      expect(Number(outcome.stderr.trim())).toBe(helper ?? process.pid);
    });
  });

  it("gets nothing of the host's environment", async () => {
    process.env.CORDON_RUN_COMMAND_SECRET = "do-not-leak";
    try {
      await run(async () => {
        const outcome = await runCommand(SH, ["-c", 'echo "[$CORDON_RUN_COMMAND_SECRET][$ONLY]" >&2'], {
          env: { ONLY: "given" },
          timeoutMs: 10_000,
        });
        expect(outcome.stderr.trim()).toBe("[][given]");
      });
    } finally {
      delete process.env.CORDON_RUN_COMMAND_SECRET;
    }
  });

  it("runs in / unless told, so a removed working directory of this process cannot fail it", async () => {
    await run(async () => {
      expect((await runCommand(SH, ["-c", "pwd >&2"], { env: {}, timeoutMs: 10_000 })).stderr.trim()).toBe("/");
      const dir = mkdtempSync(join(tmpdir(), "cordon-run-command-"));
      try {
        expect((await runCommand(SH, ["-c", "pwd >&2"], { env: {}, cwd: dir, timeoutMs: 10_000 })).stderr.trim()).toBe(dir);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });

  it("kills a command past its time", async () => {
    await run(async () => {
      const started = performance.now();
      // exec: the shell becomes the sleep, so the kill leaves no orphaned sleep behind for 30 s.
      const outcome = await runCommand(SH, ["-c", "exec sleep 30"], { env: {}, timeoutMs: 200 });
      expect(outcome.code).toBeNull();
      expect(outcome.signal).toBe("SIGKILL");
      expect(performance.now() - started).toBeLessThan(10_000);
    });
  });

  it("rejects with ENOENT for a command that is not there", async () => {
    await run(async () => {
      await expect(runCommand("/nonexistent/cordon-no-such-command", [], { env: {}, timeoutMs: 10_000 })).rejects.toMatchObject({
        code: "ENOENT",
      });
    });
  });

  it("keeps only the start of a long stderr", async () => {
    await run(async () => {
      const outcome = await runCommand(SH, ["-c", "i=0; while [ $i -lt 2000 ]; do echo 0123456789 >&2; i=$((i+1)); done"], {
        env: {},
        timeoutMs: 10_000,
      });
      expect(outcome.code).toBe(0);
      expect(outcome.stderr.length).toBe(2000);
      expect(outcome.stderr.startsWith("0123456789\n")).toBe(true);
    });
  });
});
