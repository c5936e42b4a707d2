import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { completed } from "./results.js";

/** A Proxy whose every trap throws: reading it in any way throws. */
function unreadable(): object {
  const trap = () => {
    throw new Error("trap");
  };
  return new Proxy({}, { get: trap, getOwnPropertyDescriptor: trap, ownKeys: trap, getPrototypeOf: trap, has: trap });
}

/** A careless host: its functions fail with values that throw when read. The host keeps running. */
describe.each(COMBINATIONS)("host function failures on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox.dispose();
  });

  // why: encoding the rejection threw on the host, outside every handler: the in-process host's
  // process ended with an uncaught exception (Error: trap, from codec.encodeError).
  it("a host function that rejects with an unreadable value rejects the guest's call, catchably", async () => {
    const globals = {
      rejects: async () => {
        throw unreadable();
      },
      throwsSync: () => {
        throw unreadable();
      },
    };
    const code = `export default async () => {
      const seen = [];
      for (const f of [rejects, throwsSync]) {
        try { await f(); seen.push("resolved") } catch (e) { seen.push(e instanceof Error ? e.message : typeof e) }
      }
      return seen;
    }`;
    const result = completed(await sandbox.run({ code, globals, limits: { wallTimeMs: 4000 } }));
    expect(result.value).toEqual([expect.stringMatching(/could not read/), expect.stringMatching(/could not read/)]);
    expect(completed(await sandbox.run({ code: "export default 2" })).value).toBe(2);
  });
});
