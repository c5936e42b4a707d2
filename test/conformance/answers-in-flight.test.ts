import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS, differs } from "./matrix.js";
import { workerPids } from "../helpers/processes.js";
import { completed } from "./results.js";

const ANSWER_CHARS = 256 * 1024;
const BIG = "y".repeat(ANSWER_CHARS);
const CALLS = 40;

/**
 * A run's host-call answers on their way to its guest are bounded (core/answer-gate.ts): under
 * the run's maxBridgeCallBytes, plus one answer. A guest awaited 40 calls of a host function
 * returning one shared 8 MB string, and the host encoded all 40 at once, a copy each: 450–520 MB
 * of the host's memory under a 64 MB guest limit. Here the guest stops taking answers (it spins)
 * while they become ready: the host encodes two (each ~256 Ki characters under a cap of 512 Ki),
 * and the rest wait until the guest takes those.
 *
 * Encodes are counted on the host: each answer holds an object whose getter only encoding reads
 * (or, a Response, a body whose last chunk is pulled once read).
 */
describe.each(COMBINATIONS)("host-call answers in flight on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it("wait to be encoded while the guest takes none, and all arrive once it does", async () => {
    const midway = await answersEncodedMidway(sandbox);
    if (differs(combo, "answers-taken-by-worker")) expect(midway).toBeGreaterThan(3);
    else expect(midway).toBeLessThanOrEqual(3);
  }, 40_000);

  it("short ones under a small maxBridgeCallBytes wait too", async () => {
    // 40 answers of 8 Ki characters under a cap of 64 Ki (8 answers): QuickJS posted every answer
    // under 64 Ki characters unacknowledged (released at once), so all 40 were encoded while the
    // guest spun. Deno's settles are written to a FIFO, which takes ~64 KiB more while the guest
    // spins, and the writes blocked on it hold libuv's 4 threads: 21-22 measured.
    const midway = await answersEncodedMidway(sandbox, { answerChars: 8 * 1024, maxBytes: 64 * 1024 });
    if (differs(combo, "answers-taken-by-worker")) expect(midway).toBeGreaterThan(3);
    else expect(midway).toBeLessThanOrEqual(combo.engine === "deno" ? 26 : 10);
  }, 40_000);

  it("returned as Responses, wait to be read while the guest takes none, and all arrive once it does", async () => {
    // The bodies were read whole before the answers waited: 40 × 8 MB held 755–892 MB (red team).
    const midway = await answersEncodedMidway(sandbox, { responses: true });
    if (differs(combo, "answers-taken-by-worker")) expect(midway).toBeGreaterThan(3);
    else expect(midway).toBeLessThanOrEqual(3);
  }, 40_000);
});

/**
 * On the process host the worker reads its pipe whatever its guest does: the host's bound is on
 * what the worker has not read. A worker stopped (SIGSTOP) reads nothing: the host encodes two.
 */
describe.each(COMBINATIONS.filter((combo) => combo.host === "process"))(
  "host-call answers to a stopped worker on $name",
  (combo) => {
    let sandbox: Sandbox;
    beforeAll(async () => {
      sandbox = await createSandbox(combo.options);
    });
    afterAll(async () => {
      await sandbox.dispose();
    });

    it("wait to be encoded until the worker reads the earlier ones", async () => {
      let stopped: number[] = [];
      const midway = await answersEncodedMidway(sandbox, {
        marked: () => {
          stopped = workerPids(sandbox);
          for (const pid of stopped) process.kill(pid, "SIGSTOP");
        },
        sampled: () => {
          for (const pid of stopped) process.kill(pid, "SIGCONT");
        },
        spinMs: 0,
      });
      expect(stopped.length).toBeGreaterThan(0);
      expect(midway).toBeLessThanOrEqual(3);
    }, 40_000);
  },
);

/**
 * Run a guest that calls `big()` 40 times, then (after a `mark()` call) takes no answer for
 * `spinMs`; the answers become ready 0.3 s after their calls. Returns how many answers the host
 * had encoded 0.9 s after the mark (answers ready for ~0.6 s), after checking all 40 arrived.
 */
async function answersEncodedMidway(
  sandbox: Sandbox,
  {
    marked = () => {},
    sampled = () => {},
    spinMs = 1500,
    responses = false,
    answerChars = ANSWER_CHARS,
    maxBytes = 512 * 1024,
  }: { marked?(): void; sampled?(): void; spinMs?: number; responses?: boolean; answerChars?: number; maxBytes?: number } = {},
): Promise<number> {
  const encoded = new Set<object>();
  const text = BIG.slice(0, answerChars);
  let markedAt = 0;
  const big = async () => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    if (responses) return streamedResponse(encoded);
    const answer = {};
    Object.defineProperty(answer, "s", {
      enumerable: true,
      get() {
        encoded.add(answer);
        return text;
      },
    });
    // Deeper than the walk for Request/Response bodies reaches (fetch-wire.ts, visit): only
    // encoding reads the getter.
    return { a: { b: answer } };
  };
  const mark = async () => {
    markedAt = performance.now();
    marked();
  };
  const running = sandbox.run({
    code: `export default async () => {
      const calls = Array.from({ length: ${CALLS} }, () => big());
      await mark();
      const end = Date.now() + ${spinMs};
      while (Date.now() < end) {}
      const got = await Promise.all(calls);
      let n = 0;
      for (const o of got) n += o instanceof Response ? (await o.text()).length : o.a.b.s.length;
      return n;
    }`,
    globals: { big, mark },
    limits: { maxBridgeCallBytes: maxBytes, cpuTimeMs: 10_000, wallTimeMs: 20_000 },
  });
  let midway = -1;
  try {
    while (markedAt === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    await new Promise((resolve) => setTimeout(resolve, 900));
    midway = encoded.size;
  } finally {
    sampled();
  }
  const result = completed(await running);
  expect(result.value).toBe(CALLS * (responses ? ANSWER_CHARS : answerChars));
  expect(encoded.size).toBe(CALLS);
  return midway;
}

const CHUNK = new Uint8Array(16 * 1024).fill(121);

/** A Response whose 256 KiB body is pulled in 16 chunks (streams pull a chunk or two ahead of their reader); `read` gets it once the last is pulled. */
function streamedResponse(read: Set<object>): Response {
  let pulled = 0;
  const marker = {};
  return new Response(
    new ReadableStream<Uint8Array>({
      pull(controller) {
        controller.enqueue(CHUNK);
        if (++pulled * CHUNK.length >= ANSWER_CHARS) {
          read.add(marker);
          controller.close();
        }
      },
    }),
  );
}
