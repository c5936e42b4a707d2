import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { completed } from "./results.js";

const MEMORY_MB = 32;
const TEXT_CHARS = 256 * 1024;
const TEXT = "y".repeat(TEXT_CHARS);
/** 40 MB of text in all: more than the guest's memory limit, never more than one text at a time. */
const COUNT = 160;

/**
 * What crosses into a guest and is let go is not charged to it later. isolated-vm keeps each
 * async crossing's arguments and result alive until the isolate's task queue is found empty
 * (v8/crossing-drain.ts): a host answering as fast as its guest asked kept every answer, and
 * a guest holding one 256 KB text at a time failed ERR_MEMORY_LIMIT at its 141st in 32 MB.
 */
describe.each(COMBINATIONS)("texts a guest lets go on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox({ ...combo.options, memoryMb: MEMORY_MB });
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  it("host-call answers, one awaited after another, are not held past their use", async () => {
    const result = await sandbox.run({
      code: `export default async () => { let n = 0; for (let i = 0; i < ${COUNT}; i++) n += (await text()).length; return n }`,
      globals: { text: async () => TEXT },
      limits: { wallTimeMs: 30_000, cpuTimeMs: 30_000 },
    });
    expect(completed(result).value).toBe(COUNT * TEXT_CHARS);
  }, 60_000);
});
