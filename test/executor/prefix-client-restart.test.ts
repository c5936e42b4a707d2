import { afterEach, describe, expect, it } from "vitest";
import type { EnginePrefix } from "../../src/core/engine.js";
import type { CallbackBindings } from "../../src/executor/callback-bindings.js";
import { RemotePrefixes } from "../../src/executor/remote-prefixes.js";
import { createSandbox, PrepareError, type Sandbox } from "../../src/index.js";
import { SECRET, startExecutor } from "./helpers.js";

/**
 * A client that restarts leaves its old prefixes held on the executor (it cannot dispose them)
 * until they end unused. Its new instance prepares its set again, from the same address.
 */
const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()?.();
});

const code = (n: number) => `export function f() { return ${n} }`;

async function outcomes(sandbox: Sandbox, order: number[]): Promise<string[]> {
  const seen: string[] = [];
  for (const n of order) {
    try {
      const prefix = await sandbox.prepare({ code: code(n) });
      const result = await prefix.call({ export: "f" });
      seen.push(result.ok ? String(result.value) : result.error.code);
    } catch (error) {
      if (!(error instanceof PrepareError)) throw error;
      seen.push(error.result.error.code);
    }
  }
  return seen;
}

describe("a client that restarts within the cycling window", () => {
  it("prepares its set again at once: its old instance's prefixes end for it, not a refusal", async () => {
    const service = await startExecutor({ sandbox: { host: "inprocess", engine: "v8" }, maxPrefixesPerAddress: 3 });
    cleanup.push(() => service.executor.close({ graceMs: 0 }));
    const remote = { url: service.url, secret: SECRET };
    // The first instance holds the address's 3 prefixes and goes away without disposing them (a
    // crash or a kill): nothing of it calls the executor again.
    const first = await createSandbox({ engine: "v8", host: "remote", remote });
    expect(await outcomes(first, [0, 1, 2])).toEqual(["0", "1", "2"]);
    // The restarted client, from the same address, prepares the same set in another order: its
    // first prepare ended the old 0, and before the fix preparing 0 again within 60 s read as
    // this client cycling through more prefixes than its cap (ERR_CAPACITY).
    const second = await createSandbox({ engine: "v8", host: "remote", remote });
    cleanup.push(() => second.dispose());
    expect(await outcomes(second, [2, 0, 1])).toEqual(["2", "0", "1"]);
    const health = (await (await fetch(`${service.url}/health`)).json()) as { prefixes: Record<string, number> };
    expect(health.prefixes).toMatchObject({ held: 3, endedForRoom: 3, refused: 0 });
    // The old instance's prefixes are gone with it; disposing it now ends nothing more.
    cleanup.push(() => first.dispose());
  }, 30_000);

  it("two instances of one address using more than its cap together are still refused, as one client was", () => {
    const prefixes = new RemotePrefixes(60_000, { max: 10, perAddress: 2, maxChars: 1_000_000 }, 60_000);
    try {
      const add = (client: string, key: string) =>
        prefixes.add({ dispose() {} } as EnginePrefix, { close() {} } as CallbackBindings, "address", 1, key, client);
      expect(add("A", "a1")).toHaveProperty("handle");
      expect(add("A", "a2")).toHaveProperty("handle");
      // B's prepare ends A's a1 (the least recently used); A, alive, prepares it again at once.
      expect(add("B", "b1")).toHaveProperty("handle");
      const refused = add("A", "a1");
      expect("refused" in refused && refused.refused).toMatch(/uses more prefixes at once than the 2 /);
      expect(prefixes.stats()).toMatchObject({ held: 2, endedForRoom: 1, refused: 1 });
      // B preparing A's ended key is not B cycling: an idle prefix of the address ends for it.
      expect(add("B", "a1")).toHaveProperty("handle");
    } finally {
      prefixes.disposeAll();
    }
  });
});
