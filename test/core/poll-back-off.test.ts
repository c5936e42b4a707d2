import { describe, expect, it } from "vitest";
import { PollBackOff } from "../../src/core/poll-back-off.js";

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe("PollBackOff", () => {
  it("backs off after a held-up answer, for longer while it recurs, and from the first again after a quiet spell", async () => {
    const backOff = new PollBackOff(40, 150);
    expect(backOff.active).toBe(false);
    backOff.heldUp();
    expect(backOff.active).toBe(true);
    await sleep(60);
    expect(backOff.active).toBe(false);
    // Soon after it ended: twice as long (80 ms).
    backOff.heldUp();
    await sleep(60);
    expect(backOff.active).toBe(true);
    await sleep(40);
    expect(backOff.active).toBe(false);
    // Long after (more than the last back-off): the first length again (40 ms).
    await sleep(200);
    backOff.heldUp();
    await sleep(60);
    expect(backOff.active).toBe(false);
  });

  it("never past its most, and never while turned off", async () => {
    const backOff = new PollBackOff(20, 60);
    for (let i = 0; i < 10; i++) backOff.heldUp();
    expect(backOff.active).toBe(true);
    // Doubled nine times it would be 10 s: it stops at 60 ms.
    await sleep(90);
    expect(backOff.active).toBe(false);
    backOff.off = true;
    backOff.heldUp();
    expect(backOff.active).toBe(false);
  });
});
