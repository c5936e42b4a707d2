import { afterEach, describe, expect, it } from "vitest";
import type { EnginePrefix } from "../../src/core/engine.js";
import type { CallbackBindings } from "../../src/executor/callback-bindings.js";
import { RemotePrefixes } from "../../src/executor/remote-prefixes.js";
import { createSandbox } from "../../src/index.js";
import { SECRET, startExecutor } from "./helpers.js";

/**
 * A client that uses more prefixes at once than its per-address cap: each prepare ended another
 * of its own idle prefixes, which its next call prepared again (cold), ending the next one. With
 * a cap of 2 and 3 prefixes called in turn, every call was a prepare.
 */
const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

describe("a client cycling through more prefixes than its per-address cap", () => {
  it("is refused with ERR_CAPACITY naming the cap, instead of preparing on every call", async () => {
    const service = await startExecutor({ sandbox: { host: "inprocess", engine: "v8" }, maxPrefixesPerAddress: 2 });
    cleanup.push(() => service.executor.close({ graceMs: 0 }));
    const sandbox = await createSandbox({ engine: "v8", host: "remote", remote: { url: service.url, secret: SECRET } });
    cleanup.push(() => sandbox.dispose());
    const prefixes = await Promise.all([0, 1, 2].map((n) => sandbox.prepare({ code: `export function f() { return ${n} }` })));
    const outcomes: string[] = [];
    for (let round = 0; round < 10; round++) {
      for (const [n, prefix] of prefixes.entries()) {
        const result = await prefix.call({ export: "f" });
        if (result.ok) {
          expect(result.value).toBe(n);
          outcomes.push(result.stats.warm ? "warm" : "cold");
        } else {
          expect(result.error.code).toBe("ERR_CAPACITY");
          expect(result.error.message).toMatch(/maxPrefixesPerAddress, cordon serve --max-prefixes-per-address/);
          outcomes.push("refused");
        }
      }
    }
    const count = (what: string) => outcomes.filter((o) => o === what).length;
    const { prefixes: held } = (await (await fetch(`${service.url}/health`)).json()) as {
      prefixes: { endedForRoom: number; refused: number };
    };
    console.log(
      `30 calls: ${count("warm")} warm, ${count("cold")} cold (prepared again), ${count("refused")} refused; ` +
        `executor: ${held.endedForRoom} ended for room, ${held.refused} prepares refused`,
    );
    // Two of the three stay warm; the third is refused at once, not prepared again each time.
    expect(count("cold")).toBeLessThanOrEqual(1);
    expect(count("warm")).toBeGreaterThanOrEqual(19);
    expect(held.endedForRoom).toBeLessThanOrEqual(2);
  }, 60_000);

  it("ends a prefix of its own unused for the window instead of refusing; refuses when each was used within it", async () => {
    const prefixes = new RemotePrefixes(60_000, { max: 10, perAddress: 2, maxChars: 1_000_000 }, 300);
    try {
      const stub = () => ({ prefix: { dispose() {} } as EnginePrefix, bindings: { close() {} } as CallbackBindings });
      const add = (key: string) => {
        const { prefix, bindings } = stub();
        return prefixes.add(prefix, bindings, "client", 1, key);
      };
      expect(add("a")).toHaveProperty("handle");
      expect(add("b")).toHaveProperty("handle");
      await new Promise((resolve) => setTimeout(resolve, 400));
      // At the cap: a (least recently used) ends; b is unused for longer than the window.
      expect(add("c")).toHaveProperty("handle");
      // a again, right after it ended: b, unused for the window, ends for it (not a refusal).
      expect(add("a")).toHaveProperty("handle");
      expect(prefixes.stats()).toMatchObject({ held: 2, endedForRoom: 2, refused: 0 });
      // b again: c and a were both used within the window, so it is refused, and nothing ends.
      const refused = add("b");
      expect(refused).toHaveProperty("refused");
      expect("refused" in refused && refused.refused).toMatch(
        /uses more prefixes at once than the 2 .*maxPrefixesPerAddress, cordon serve --max-prefixes-per-address/,
      );
      expect(prefixes.stats()).toMatchObject({ held: 2, endedForRoom: 2, refused: 1 });
      // Past the window it is not cycling any more: the least recently used ends, as before.
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect(add("b")).toHaveProperty("handle");
    } finally {
      prefixes.disposeAll();
    }
  });
});
