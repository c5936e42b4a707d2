import type * as IVM from "isolated-vm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { V8Instance } from "../../src/engines/v8/instance.js";
import { createSandbox } from "../../src/index.js";
import { value } from "../helpers/results.js";

// Texts of 512 characters or more cross into an isolate inside an array (src/engines/v8/crossing-text.ts):
// isolated-vm would otherwise leave them outside the isolate's heap as external strings.

const SAMPLES: Record<string, string> = {
  "511 characters": "a".repeat(511),
  "512 characters": "b".repeat(512),
  "1 KB": "c".repeat(1024),
  "30 KB of JSON-ish text": JSON.stringify(Array.from({ length: 400 }, (_, i) => ({ i, s: "event" }))).slice(0, 30_000),
  "Latin-1": "é".repeat(2000),
  "two-byte, astral and lone surrogates": `${"😀𝄞ü".repeat(300)}\ud800 lone \udfff${"x".repeat(600)}`,
  "separator-like characters": "\u0001\u0002 p\u0001p ".repeat(200),
};

const PREFIX = `
  export function echo(x) { return x }
  export function length(x) { return x.length }
  export async function viaHost(x) { return await hostEcho(x) }
  export default (input) => input;
  export function url(href) { const u = new URL(href); u.hash = "h"; return [u.href, u.searchParams.get("a").length, u.pathname] }
  export function urlHref(href) { const u = new URL(href); u.hash = "h"; return u.href + " " + u.search.length }
`;

describe("v8: long texts cross into the isolate", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("intact in every kind of crossing: call arguments, host results, run input, globals, module code", async () => {
    // busyPollMs 0: every call is a crossing (a stream would otherwise go through shared memory).
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", busyPollMs: 0 });
    const long = SAMPLES["30 KB of JSON-ish text"];
    const prefix = await sandbox.prepare({
      code: `export const literal = ${JSON.stringify(long)};\n${PREFIX}\nexport function global() { return longGlobal }`,
      globals: { hostEcho: async (x: string) => x, longGlobal: long },
    });
    for (const [name, text] of Object.entries(SAMPLES)) {
      expect(value(await prefix.call({ export: "echo", args: [text] })), `call ${name}`).toBe(text);
      expect(value(await prefix.call({ export: "viaHost", args: [text] })), `host result ${name}`).toBe(text);
      expect(
        value(await sandbox.run({ code: PREFIX, input: text, globals: { hostEcho: (x: string) => x } })),
        `input ${name}`,
      ).toBe(text);
      expect(value(await prefix.run({ code: "export default (input) => input", input: text })), `prefix.run ${name}`).toBe(text);
    }
    expect(value(await prefix.call({ export: "global" }))).toBe(long);
    expect(value(await sandbox.run({ code: `export default () => ${JSON.stringify(long)}` }))).toBe(long);
    // Calls gathered into one crossing: their joined text is long even where each argument is short.
    const burst = await Promise.all(
      Array.from({ length: 40 }, (_, i) => prefix.call({ export: "echo", args: [`${i}:${"z".repeat(i * 20)}`] })),
    );
    expect(burst.map(value)).toEqual(Array.from({ length: 40 }, (_, i) => `${i}:${"z".repeat(i * 20)}`));
  });

  it("a guest that rewrites Array.prototype's elements cannot change a long text on its way in", async () => {
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", busyPollMs: 0 });
    const prefix = await sandbox.prepare({
      code: `
        const forge = { get() { return "forged" }, set() {}, configurable: true };
        Object.defineProperty(Array.prototype, "0", forge);
        Object.defineProperty(Object.prototype, "0", forge);
        Array.prototype[Symbol.iterator] = function* () { yield "forged" };
        ${PREFIX}`,
      globals: { hostEcho: async (x: string) => x },
    });
    const text = "t".repeat(5000);
    expect(value(await prefix.call({ export: "echo", args: [text] }))).toBe(text);
    expect(value(await prefix.call({ export: "viaHost", args: [text] }))).toBe(text);
    expect(value(await prefix.run({ code: "export default (input) => input", input: text }))).toBe(text);
    // (Not its URLSearchParams: the runtime's lists are built with the realm's [[Set]], which such a
    // setter swallows in the guest's own realm, on every engine, whatever the host sends.)
    const href = `https://example.com/p?a=${"u".repeat(3000)}`;
    expect(value(await prefix.call({ export: "urlHref", args: [href] }))).toBe(`${href}#h 3003`);
  });

  it("a prefix called with long arguments and long host results keeps them in its heap, not in the host's memory", async () => {
    let instance: V8Instance | undefined;
    const call = V8Instance.prototype.call;
    vi.spyOn(V8Instance.prototype, "call").mockImplementation(function (this: V8Instance, ...args) {
      instance = this;
      return call.apply(this, args);
    });
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess", busyPollMs: 0 });
    const text = "e".repeat(20_000);
    const prefix = await sandbox.prepare({ code: PREFIX, globals: { hostEcho: async () => text } });
    for (let i = 0; i < 1500; i++) expect(value(await prefix.call({ export: "length", args: [text] }))).toBe(20_000);
    for (let i = 0; i < 300; i++) expect(value(await prefix.call({ export: "viaHost", args: ["x"] }))).toBe(text);
    // A long URL's parts come from the host too (parsed there, and again for each setter).
    const href = `https://example.com/p?a=${"u".repeat(3000)}`;
    for (let i = 0; i < 1000; i++) {
      expect(value(await prefix.call({ export: "url", args: [href] }))).toEqual([`${href}#h`, 3000, "/p"]);
    }
    const isolate = (instance as unknown as { isolate: IVM.Isolate }).isolate;
    const external = (await isolate.getHeapStatistics()).externally_allocated_size;
    // As external strings, 1,800 texts of 20 KB and 2,000 URL answers of 3 KB stayed outside the
    // heap until a full collection: ~42 MB here (a 128 MB isolate collects them near its limit).
    // Copied in, they are the heap's.
    expect(external).toBeLessThan(4 * 1024 * 1024);
  });
});
