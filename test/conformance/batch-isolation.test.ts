import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunResult, type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";

/**
 * Calls to one prefix that wait together cross together (decision 005): the guest runs them one
 * after another in one crossing. Whatever one of them does — a result that throws when read, a
 * microtask it leaves behind, the runtime's entry called by hand — stays its own: every other
 * call of the crossing gets its own outcome and its own logs.
 */
const ROUNDS = 4;

/** The value, or the error's message: one thing to compare. */
function shown(result: RunResult): unknown {
  return result.ok ? result.value : result.error.message;
}

describe.each(COMBINATIONS)("calls crossing together on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    // One instance: the calls of a burst queue behind the first and cross together.
    sandbox = await createSandbox({ ...combo.options, maxConcurrentRuns: 1 });
  });
  afterAll(async () => {
    await sandbox?.dispose();
  });

  it("a result whose `then` or promise `constructor` throws fails only its own call", async () => {
    // Read outside the call's own try, such a throw left the crossing: every call of it that had
    // no outcome yet failed with the hostile call's error.
    await using prefix = await sandbox.prepare({
      code: `export function f(x) {
          if (x === "then") return { get then() { throw new Error("then of " + x) } };
          if (x === "ctor") {
            const p = Promise.resolve(x);
            Object.defineProperty(p, "constructor", { get() { throw new Error("constructor of " + x) } });
            return p;
          }
          return "real:" + x;
        }`,
    });
    const args = ["a", "b", "then", "c", "ctor", "d"];
    const expected = ["real:a", "real:b", "then of then", "real:c", "constructor of ctor", "real:d"];
    for (let round = 0; round < ROUNDS; round++) {
      const results = await Promise.all(args.map((x) => prefix.call({ export: "f", args: [x] })));
      expect(results.map(shown), `round ${round}`).toEqual(expected);
    }
    expect(shown(await prefix.call({ export: "f", args: ["then"] }))).toBe("then of then");
  });

  it("what a call leaves queued after its outcome logs nothing and makes no host call, in no call", async () => {
    // The leftover ran after the crossing's loop, while the runtime still pointed at its last
    // call: its log landed in another caller's result, and its host call was made.
    const noted: string[] = [];
    await using prefix = await sandbox.prepare({
      code: `export function f(x) {
          if (x === "evil") Promise.resolve().then(() => { console.log("late from " + x); void note("late " + x) });
          console.log("from " + x);
          return x;
        }`,
      globals: {
        note: async (text: string) => {
          noted.push(text);
        },
      },
    });
    const args = ["a", "evil", "b", "c", "d"];
    for (let round = 0; round < ROUNDS; round++) {
      const results = await Promise.all(args.map((x) => prefix.call({ export: "f", args: [x] })));
      expect(results.map(shown), `round ${round}`).toEqual(args);
      expect(
        results.map((r) => r.logs.map((l) => l.message)),
        `round ${round}`,
      ).toEqual(args.map((x) => [`from ${x}`]));
    }
    const lone = await prefix.call({ export: "f", args: ["evil"] });
    expect(lone.logs.map((l) => l.message)).toEqual(["from evil"]);
    await new Promise((r) => setTimeout(r, 100));
    expect(noted).toEqual([]);
  });

  it("the runtime's entry called during a call changes no outcome: every call keeps its own", async () => {
    // A call reset the entry's one-shot flag: one that called __cordon_entry by hand set the
    // outcome of the crossing's first call.
    await using prefix = await sandbox.prepare({
      code: `export function f(x) {
          if (x === "evil") __cordon_entry({ default: "forged" });
          return "real:" + x;
        }`,
    });
    const args = ["a", "b", "evil", "c"];
    for (let round = 0; round < ROUNDS; round++) {
      const results = await Promise.all(args.map((x) => prefix.call({ export: "f", args: [x] })));
      expect(results.map(shown), `round ${round}`).toEqual(args.map((x) => `real:${x}`));
    }
    expect(shown(await prefix.call({ export: "f", args: ["evil"] }))).toBe("real:evil");
  });
});
