import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS } from "./matrix.js";
import { completed, failed } from "./results.js";

/**
 * What a guest sends the host is decoded on the host's thread, and JSON.parse's cost follows the
 * objects it builds, not the bytes: 16 M characters of `[{},{},…]` under maxOutputBytes held the
 * host's loop 2.5-3.4 s and kept 326 MB. The host weighs the text first (core/codec-containers.ts):
 * at most 1,000,000 objects and arrays a result (its exports included) or a host call's arguments.
 */
describe.each(COMBINATIONS)("objects and arrays a crossing holds on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
    await sandbox.run({ code: "export default 1" }); // a process worker's start-up is not the guest's time
  });
  afterAll(async () => {
    await sandbox.dispose();
  });
  // Encoding a million objects takes an interpreter (QuickJS) seconds on a loaded machine.
  const limits = { wallTimeMs: 60_000, cpuTimeMs: 60_000 };

  it("a result of a million crosses; one more fails with ERR_OUTPUT_TOO_LARGE saying why", async () => {
    // 999,998 shared empty objects in an array, and an export of one more: 1,000,000 with the array.
    const at = completed(
      await sandbox.run({ limits, code: "const o = {}; export const one = {}; export default Array(999998).fill(o);" }),
    );
    expect((at.value as unknown[]).length).toBe(999_998);
    expect(at.exports).toEqual({ one: {} });
    const over = failed(
      await sandbox.run({ limits, code: "const o = {}; export const one = {}; export default Array(999999).fill(o);" }),
    );
    expect(over.error).toMatchObject({
      code: "ERR_OUTPUT_TOO_LARGE",
      message: expect.stringMatching(/^the result: more than 1000000 objects and arrays as the codec writes them/),
    });
    // The instance was not at fault: the next run is served.
    expect(completed(await sandbox.run({ code: "export default 2" })).value).toBe(2);
  });

  it("a thrown error's fields are weighed as a result is", async () => {
    const result = failed(
      await sandbox.run({
        limits,
        code: "const o = {}; export default () => { const e = new Error('many'); e.items = Array(1000000).fill(o); throw e; };",
      }),
    );
    expect(result.error).toMatchObject({
      code: "ERR_OUTPUT_TOO_LARGE",
      message: expect.stringMatching(/^the error the guest threw: more than 1000000 objects and arrays/),
    });
  });

  it("a host call's arguments of more than a million are refused before the host function runs", async () => {
    let calls = 0;
    const take = (items: unknown[]) => {
      calls++;
      return items.length;
    };
    const result = completed(
      await sandbox.run({
        limits,
        globals: { take },
        code: `const o = {};
          export default async () => {
            const fits = await take(Array(999998).fill(o)); // with the arguments' array: 1,000,000
            try {
              await take(Array(999999).fill(o));
              return [fits, "taken"];
            } catch (e) {
              return [fits, e.name, e.code, e.message];
            }
          };`,
      }),
    );
    const [fits, name, code, message] = result.value as [number, string, string, string];
    expect(fits).toBe(999_998);
    expect([name, code]).toEqual(["TypeError", "ERR_NOT_SERIALIZABLE"]);
    expect(message).toMatch(/^globals\.take\(\) arguments: more than 1000000 objects and arrays/);
    expect(calls).toBe(1);
  });
});
