import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS } from "../../src/core/limits.js";
import { hostRunBody, SECRET, startExecutor, type TestExecutor } from "./helpers.js";

/**
 * A `/host` request's inputText is text a remote client wrote: the executor only scans it, and
 * the guest decodes it (v8, quickjs) with the codec its realm was given. Whatever it holds, the
 * run fails with ERR_NOT_SERIALIZABLE naming what and where, as a value the encoder refuses does.
 */

let service: TestExecutor;
beforeAll(async () => {
  service = await startExecutor();
});
afterAll(async () => {
  await service.executor.close({ graceMs: 0 });
});

/** The answer of a run of `(input) => input` given `inputText`. */
async function runWith(engine: string, inputText: string): Promise<{ ok: boolean; error?: Record<string, unknown> }> {
  const body = {
    ...(await hostRunBody("export default (input) => input")),
    engine,
    inputText,
    // Parsing a megabyte of nesting takes a noisy machine a while: the limit is not what is tested.
    limits: { ...DEFAULT_LIMITS, wallTimeMs: 30_000, cpuTimeMs: 30_000 },
  };
  const response = await fetch(`${service.url}/host`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${SECRET}` },
    body: JSON.stringify(body),
  });
  expect(response.status).toBe(200);
  return JSON.parse(await response.text());
}

describe.each(["v8", "quickjs"])("a remote client's hostile inputText on %s", (engine) => {
  // why: a 1e6-deep text failed as the guest's own RangeError (v8) or SyntaxError "stack
  // overflow" (quickjs), ERR_USER_CODE; a malformed tag as "v.map is not a function"; a damaged
  // typed array arrived as zeros, and the run succeeded.
  it("fails the run with ERR_NOT_SERIALIZABLE naming what is wrong", async () => {
    const N = 1_000_000;
    const cases: [string, RegExp][] = [
      // QuickJS's JSON.parse recurses and stops first: its message is its own, the code is ours.
      [`${"[".repeat(N)}${"]".repeat(N)}`, /^value\[0\].* is nested deeper than 520 levels$|^value is not JSON text it can read/],
      [`${'{"$":"s","v":['.repeat(100_000)}${"]}".repeat(100_000)}`, /^value<item 0>.* is nested deeper|^value is not JSON text/],
      ['{"a":[{"$":"m","v":5}]}', /^value\.a\[0\] is tagged "m" but its "v" is not an array of \[key, value\] pairs/],
      ['{"$":"zz","v":5}', /^value has a tag \("zz"\) this codec does not know/],
      ['{"$":"t","t":"Uint16Array","v":"AA=="}', /^value is a Uint16Array of 1 byte, not a whole number of 2-byte elements/],
      ['{"$":"t","t":"Float64Array","v":"!!!!"}', /^value is tagged "t" but its "v" is not base64 text/],
    ];
    for (const [text, message] of cases) {
      const answer = await runWith(engine, text);
      expect(answer.ok, text.slice(0, 40)).toBe(false);
      expect(answer.error, text.slice(0, 40)).toMatchObject({ code: "ERR_NOT_SERIALIZABLE", message });
    }
    // A deep value within the bound still crosses.
    const deep = `${"[".repeat(500)}7${"]".repeat(500)}`;
    expect(await runWith(engine, deep)).toMatchObject({ ok: true });
  }, 120_000);
});
