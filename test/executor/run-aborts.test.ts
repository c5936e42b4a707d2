import { describe, expect, it } from "vitest";
import { EARLY_ABORT_MS, RunAborts } from "../../src/executor/run-aborts.js";

/** RunAborts alone: which run an abort reaches, and what an abort that came first keeps. */
describe("RunAborts", () => {
  it("aborts the run being served under the client's id only", () => {
    const aborts = new RunAborts();
    const run = aborts.begin("client-a", "r1");
    aborts.abort("client-b", "r1", "not yours");
    expect(run.signal.aborted).toBe(false);
    aborts.abort("client-a", "r1", "mine");
    expect(run.signal.aborted).toBe(true);
    expect(run.signal.reason).toBe("mine");
    run.end();
    // The other client's abort waits for a run of its own that never comes; nothing else.
    expect(aborts.waiting).toBe(1);
  });

  it("keeps an abort that came before its run, for that run once", () => {
    const aborts = new RunAborts();
    aborts.abort("client-a", "r1", "overtaken");
    const run = aborts.begin("client-a", "r1");
    expect(run.signal.aborted).toBe(true);
    expect(run.signal.reason).toBe("overtaken");
    expect(aborts.waiting).toBe(0);
    expect(aborts.begin("client-a", "r1").signal.aborted).toBe(false);
    // Another client's run with the same id was never aborted.
    aborts.abort("client-a", "r2", "mine");
    expect(aborts.begin("client-b", "r2").signal.aborted).toBe(false);
  });

  it("forgets an early abort after EARLY_ABORT_MS", () => {
    let now = 0;
    const aborts = new RunAborts(undefined, () => now);
    aborts.abort("client-a", "r1", "overtaken");
    now = EARLY_ABORT_MS + 1;
    expect(aborts.begin("client-a", "r1").signal.aborted).toBe(false);
    // And drops expired ones as new ones come, taken or not.
    aborts.abort("client-a", "r2", "x");
    now += EARLY_ABORT_MS + 1;
    aborts.abort("client-a", "r3", "y");
    expect(aborts.waiting).toBe(1);
  });

  it("bounds what early aborts hold: a flood of them forgets the oldest first", () => {
    const aborts = new RunAborts({ ms: EARLY_ABORT_MS, count: 3, chars: 10_000, perAddress: 3 });
    for (let i = 0; i < 1000; i++) aborts.abort("flood", `id-${i}`, "r");
    expect(aborts.waiting).toBe(3);
    expect(aborts.begin("flood", "id-996").signal.aborted).toBe(false);
    expect(aborts.begin("flood", "id-997").signal.aborted).toBe(true);
    const byChars = new RunAborts({ ms: EARLY_ABORT_MS, count: 1000, chars: 10_000, perAddress: 1000 });
    for (let i = 0; i < 10; i++) byChars.abort("flood", `id-${i}`, "x".repeat(4096));
    expect(byChars.waiting).toBe(2);
    expect(byChars.begin("flood", "id-9").signal.reason).toBe("x".repeat(4096));
    // An abort repeated for the same id counts once.
    const repeated = new RunAborts({ ms: EARLY_ABORT_MS, count: 1000, chars: 10_000, perAddress: 1000 });
    for (let i = 0; i < 100; i++) repeated.abort("c", "same", "x".repeat(4096));
    expect(repeated.waiting).toBe(1);
    expect(repeated.begin("c", "same").signal.reason).toBe("x".repeat(4096));
  });

  it("holds one address's early aborts to its share: a flood from one does not push out another's", () => {
    const aborts = new RunAborts({ ms: EARLY_ABORT_MS, count: 8, chars: 100_000, perAddress: 2 });
    aborts.abort("honest", "h1", "mine", "10.0.0.1");
    // Another address, under any client ids it likes.
    for (let i = 0; i < 1000; i++) aborts.abort(`junk-${i}`, `id-${i}`, "r", "10.0.0.2");
    expect(aborts.waiting).toBe(3);
    expect(aborts.begin("honest", "h1").signal.reason).toBe("mine");
    // The flooding address kept its newest two.
    expect(aborts.begin("junk-998", "id-998").signal.aborted).toBe(true);
    expect(aborts.begin("junk-997", "id-997").signal.aborted).toBe(false);
    // A taken one leaves its share; past it again, its oldest (id-999) goes.
    aborts.abort("junk", "a", "r", "10.0.0.2");
    expect(aborts.waiting).toBe(2);
    aborts.abort("junk", "b", "r", "10.0.0.2");
    expect(aborts.waiting).toBe(2);
    expect(aborts.begin("junk-999", "id-999").signal.aborted).toBe(false);
    expect(aborts.begin("junk", "a").signal.aborted).toBe(true);
  });
});
