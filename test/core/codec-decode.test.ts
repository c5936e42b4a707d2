import vm from "node:vm";
import { describe, expect, it } from "vitest";
import { Bindings, hostModuleSources, sharedCodec } from "../../src/core/bindings.js";
import { type Codec, codecSource, createCodec } from "../../src/core/codec.js";

/**
 * Text the decoder reads may come from a side that did not use the encoder: a guest's answer, a
 * host call's arguments, a remote client's inputText. Whatever it holds, a decode either gives
 * the value the encoder would have written it for, or fails with ERR_NOT_SERIALIZABLE naming
 * what is wrong and where: never an engine's bare TypeError, a stack overflow, or a quietly
 * different value.
 */

const host = createCodec(true);
// The decoder a guest realm runs: the same parts, stringified (codecSource).
const guest = vm.runInContext(`(${codecSource()})()`, vm.createContext({})) as Codec;
const CODECS: [string, Codec][] = [
  ["host", host],
  ["guest realm", guest],
];

/** The coded failure decoding `text` gave (fails the test if it decoded, or threw uncoded). */
function refusal(codec: Codec, text: string): { code: string; path: string; message: string } {
  try {
    codec.decode(text);
  } catch (error) {
    const { code, path, message } = error as { code?: string; path?: string; message: string };
    expect({ code, message }).toMatchObject({ code: "ERR_NOT_SERIALIZABLE" });
    return { code: code as string, path: path as string, message };
  }
  throw new Error(`decoded without an error: ${text.slice(0, 80)}`);
}

const deepArrays = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`;
const deepSets = (n: number) => `${'{"$":"s","v":['.repeat(n)}${"]}".repeat(n)}`;

describe.each(CODECS)("decoding hostile text (%s codec)", (_name, codec) => {
  // why: a 1e6-deep text overflowed the decoder's recursion: a RangeError, no code, no path.
  it("refuses nesting past the encoders' bound with ERR_NOT_SERIALIZABLE, not a stack overflow", () => {
    for (const text of [deepArrays(1_000_000), deepSets(100_000), `{"a":${'{"b":'.repeat(100_000)}1${"}".repeat(100_000)}}`]) {
      const { message, path } = refusal(codec, text);
      expect(message).toMatch(/ is nested deeper than 520 levels$/);
      expect(path.length).toBeGreaterThan(520);
    }
    expect(refusal(codec, deepArrays(521)).path).toBe(`value${"[0]".repeat(520)}`);
    // Maps, errors' causes and tagged escapes count one level each, as the encoder counts them.
    const deepMap = `${'{"$":"m","v":[[1,'.repeat(600)}0${"]]}".repeat(600)}`;
    expect(refusal(codec, deepMap).message).toMatch(/^value<entry 0>\.value<entry 0>\.value.* is nested deeper/);
    const deepCause = `${'{"$":"e","n":"Error","m":"x","c":'.repeat(600)}0${"}".repeat(600)}`;
    expect(refusal(codec, deepCause).message).toMatch(/^value\.cause\.cause.* is nested deeper/);
  });

  it("reads every value an encoder may write, up to the deepest the host's encoder allows", () => {
    // The host's encoder (520 levels) is the deeper: a value it wrote decodes in either realm.
    // 519 levels of arrays and escaped objects, a Date on the last: past the guest encoder's 512.
    let deep: unknown = [undefined, -0, 5n, new Date(1)];
    for (let i = 0; i < 518; i++) deep = i % 3 ? [deep] : { k: deep, $: i };
    expect(codec.decode(host.encode(deep))).toEqual(deep);
    expect(() => host.encode([deep])).toThrow(/nested deeper than 520/);
    const shallow = new Map<unknown, unknown>([[{ a: [1] }, new Set([new Error("e", { cause: [2] })])]]);
    // Written again as it was read (the guest realm's values are not the host's, for toEqual).
    const text = host.encode(shallow);
    expect(codec.encode(codec.decode(text))).toBe(text);
  });

  // why: `{"$":"m","v":5}` threw "v.map is not a function" (no code, no path); an unknown tag
  // came back as a plain object holding "$", a value no encoder writes.
  it("refuses a malformed or unknown tag, naming the tag and its path", () => {
    const cases: [string, RegExp][] = [
      ['{"a":[{"$":"m","v":5}]}', /^value\.a\[0\] is tagged "m" but its "v" is not an array of \[key, value\] pairs/],
      ['{"$":"m","v":[[1,2],[3]]}', /^value is tagged "m" \(a Map\) but its entry 1 is not a \[key, value\] pair/],
      ['{"$":"s","v":{}}', /^value is tagged "s" but its "v" is not an array/],
      ['{"$":"o","v":5}', /^value is tagged "o" but its "v" is not an object/],
      ['{"$":"o","v":[1]}', /^value is tagged "o" but its "v" is not an object/],
      ['{"$":"d","v":"2020"}', /^value is tagged "d" but its "v" is not a number or null/],
      ['{"$":"n","v":"12"}', /^value is tagged "n" but its "v" is not "NaN", "Infinity", "-Infinity" or "-0"/],
      ['{"$":"b","v":"0x10"}', /^value is tagged "b" but its "v" is not a decimal integer/],
      ['{"$":"b","v":7}', /^value is tagged "b" but its "v" is not a decimal integer/],
      ['{"$":"b","v":"-"}', /^value is tagged "b" but its "v" is not a decimal integer/],
      ['{"$":"e","n":5,"m":"x"}', /^value is tagged "e" \(an Error\) but has no string "n" \(name\) and "m" \(message\)/],
      ['{"$":"e","n":"Error","m":"x","a":{}}', /^value is tagged "e" but its "a" \(errors\) is not an array/],
      ['{"$":"e","n":"Error","m":"x","f":[1]}', /^value is tagged "e" but its "f" \(fields\) is not an object/],
      ['{"$":"e","n":"Error","m":"x","s":1}', /^value is tagged "e" but its "s" \(stack\) is not a string/],
      ['{"x":{"$":"zz","v":5}}', /^value\.x has a tag \("zz"\) this codec does not know/],
      ['{"$":5}', /^value has a tag \(of type number\) this codec does not know/],
      ['{"$":"t","v":"AAAA"}', /^value is tagged "t" \(a typed array\) but its "t" names no kind/],
      ['{"$":"t","t":"toString","v":"AAAA"}', /^value is tagged as a toString, but a toString cannot be read here/],
      ['{"$":"x","v":1}', /does not know/],
      ["[1,", /^value is not JSON text it can read: /],
    ];
    for (const [text, message] of cases) expect(refusal(codec, text).message, text).toMatch(message);
    expect(refusal(codec, '{"a":{"b":[0,{"$":"d","v":{}}]}}').path).toBe("value.a.b[1]");
    expect(refusal(codec, '{"$":"m","v":[[{"$":"u"},{"$":"o","v":[]}]]}').path).toBe("value<entry 0>.value");
    expect(refusal(codec, '{"$":"s","v":[1,{"$":"n","v":"1"}]}').path).toBe("value<item 1>");
    expect(refusal(codec, '{"$":"e","n":"E","m":"","f":{"code":{"$":"d","v":"x"}}}').path).toBe("value.code");
  });

  // why: a payload that was not base64, or not whole elements, decoded to zeros or to an
  // empty array, and nothing said so.
  it("refuses bytes that are not base64, or not a whole number of the kind's elements", () => {
    const kinds: [string, number][] = [
      ["Int8Array", 1],
      ["Uint8Array", 1],
      ["Uint8ClampedArray", 1],
      ["Int16Array", 2],
      ["Uint16Array", 2],
      ["Int32Array", 4],
      ["Uint32Array", 4],
      ["Float32Array", 4],
      ["Float64Array", 8],
      ["BigInt64Array", 8],
      ["BigUint64Array", 8],
      ["DataView", 1],
    ];
    const bad = ["!!!!", "AA AA", "AAAA\n", "A", "AAAAA", "A===", "AA=A", "AAA==", "é0==", 5, null];
    for (const [kind, size] of kinds) {
      for (const v of bad) {
        const text = JSON.stringify({ x: { $: "t", t: kind, v } });
        expect(refusal(codec, text), text).toMatchObject({
          path: "value.x",
          message: /is tagged "t" but its "v" is not base64 text/,
        });
      }
      // 1..size-1 bytes more than a whole number of elements.
      for (let extra = 1; extra < size; extra++) {
        const bytes = Buffer.alloc(size * 3 + extra).toString("base64");
        const { message } = refusal(codec, JSON.stringify({ $: "t", t: kind, v: bytes }));
        expect(message).toBe(`value is a ${kind} of ${size * 3 + extra} bytes, not a whole number of ${size}-byte elements`);
        expect(refusal(codec, JSON.stringify({ $: "t", t: kind, v: "AA==" })).message).toBe(
          `value is a ${kind} of 1 byte, not a whole number of ${size}-byte elements`,
        );
      }
      // Whole elements read as they were written, padded or not.
      const whole = Buffer.from(Array.from({ length: size * 3 }, (_, i) => i * 37));
      for (const v of [whole.toString("base64"), whole.toString("base64").replace(/=+$/, "")]) {
        const out = codec.decode(JSON.stringify({ $: "t", t: kind, v })) as ArrayBufferView;
        expect(Buffer.from(out.buffer, out.byteOffset, out.byteLength).equals(whole), `${kind} ${v}`).toBe(true);
      }
    }
    for (const v of bad)
      expect(refusal(codec, JSON.stringify({ $: "a", v })).message).toMatch(
        /^value is tagged "a" but its "v" is not base64 text/,
      );
    expect(new Uint8Array(codec.decode('{"$":"a","v":"AQID"}') as ArrayBuffer)).toEqual(new Uint8Array([1, 2, 3]));
    expect((codec.decode('{"$":"a","v":""}') as ArrayBuffer).byteLength).toBe(0);
  });
});

describe("hostile text decoded on the host", () => {
  // why: the host's fetch extension built a Headers, Request or Response from the text's fields:
  // its constructor's TypeError (a bad header name, a URL) crossed with no code and no path.
  it("a Request, Response or Headers it cannot build is refused with the codec's code and path", () => {
    const codec = sharedCodec();
    const cases: [string, RegExp][] = [
      ['{"x":{"$":"H","h":[["bad name","v"]]}}', /^value\.x is tagged "H" but cannot be read: /],
      ['{"$":"H","h":5}', /^value is tagged "H" but cannot be read: /],
      ['{"$":"Q","m":"GET","u":"not a url","h":[]}', /^value is tagged "Q" but cannot be read: /],
      ['{"$":"R","s":1,"h":[]}', /^value is tagged "R" but cannot be read: /],
      ['{"$":"H","h":[[1,{"$":"m","v":1}]]}', /^value\.h\[0\]\[1\] is tagged "m" but its "v" is not an array/],
      ['{"$":"Z"}', /^value has a tag \("Z"\) this codec does not know/],
    ];
    for (const [text, message] of cases) expect(refusal(codec, text).message, text).toMatch(message);
    expect(refusal(codec, `{"$":"${"Z".repeat(1000)}"}`).message).toMatch(/^value has a tag \("Z{40}…"\) this codec/);
  });

  // why: undici builds each Request, Response or Headers slowly: 999,000 crafted empty Responses
  // (under the objects cap) held the host 15 s and 1.3 GB. The guests' encoders refuse more than
  // 1,000 a value; the host's decoder refuses what a tampered runtime sends past them.
  it("more than 1,000 Requests, Responses and Headers in one text are refused before they are built", () => {
    const codec = sharedCodec();
    const list = (n: number) => `[${Array(n).fill('{"$":"R","s":200,"t":"","h":[],"b":null}').join(",")}]`;
    expect((codec.decode(list(1_000)) as Response[])[999]).toBeInstanceOf(Response);
    expect(refusal(codec, list(1_001)).message).toMatch(
      /Requests, Responses and Headers cannot cross: the value holds 1001 of them, at most 1000/,
    );
    // Counted per text: the next decode starts over.
    expect((codec.decode(list(1_000)) as Response[]).length).toBe(1_000);
  });

  // why: a host call's arguments are text the guest wrote; a malformed one was answered with a
  // bare "malformed arguments", which said neither what nor where.
  it("a host call's malformed arguments are refused with the codec's code and path", async () => {
    const bindings = new Bindings({ api: { get: (x: unknown) => x } });
    const cases: [string, RegExp][] = [
      [deepArrays(1_000_000), /^globals\.api\.get\(\) arguments\[0\].* is nested deeper than 520 levels$/],
      ['[{"$":"m","v":5}]', /^globals\.api\.get\(\) arguments\[0\] is tagged "m" but its "v" is not an array/],
      ['[{"$":"t","t":"Uint16Array","v":"AA=="}]', /^globals\.api\.get\(\) arguments\[0\] is a Uint16Array of 1 byte,/],
    ];
    for (const [text, message] of cases) {
      const answer = await bindings.dispatch(0, text);
      expect(answer.ok).toBe(false);
      const error = sharedCodec().decode(answer.text) as Error & { code?: string };
      expect(error.code).toBe("ERR_NOT_SERIALIZABLE");
      expect(error.message).toMatch(message);
    }
  });
});

describe("the host weighs a text's objects and arrays before JSON.parse builds them", () => {
  const MAX = 1_000_000;
  /** `[{},{},…]`: `n` objects and arrays, the outer array counted. */
  const empties = (n: number) =>
    `[${Array(n - 1)
      .fill("{}")
      .join(",")}]`;

  // why: JSON.parse's cost follows the objects it makes: 16 M characters of `[{},{},…]` (5.3 M
  // objects, under maxOutputBytes) held the host's loop 2.5-3.4 s and kept 326 MB of its heap.
  it("refuses text of more than a million, with a code, the path and what to do instead", () => {
    const codec = sharedCodec();
    expect((codec.decode(empties(MAX)) as unknown[]).length).toBe(MAX - 1);
    const { path, message } = refusal(codec, empties(MAX + 1));
    expect(path).toBe("value");
    expect(message).toMatch(/^value: more than 1000000 objects and arrays as the codec writes them .*send fewer, larger values/);
    // A Map's entry pairs count: the codec's form is weighed, as it is what JSON.parse builds.
    const pairs = `{"$":"m","v":[${Array(MAX).fill("[1,2]").join(",")}]}`;
    expect(refusal(codec, pairs).message).toMatch(/more than 1000000 objects and arrays/);
    // `weigh` refuses alike without decoding; an allowance is added to the cap.
    expect(() => codec.weigh(empties(MAX + 1), "the result")).toThrow(/^the result: more than 1000000/);
    expect(() => codec.weigh(empties(MAX + 3), "the result", 3)).not.toThrow();
    expect(() => codec.weigh(empties(MAX + 4), "the result", 3)).toThrow(/more than 1000000/);
  });

  it("counts brackets outside strings only, escaped quotes included", () => {
    const codec = sharedCodec();
    // 3 M brackets inside strings, one with escaped quotes and backslashes before them.
    const inside = `["${"{[".repeat(750_000)}","\\\\\\"${"[{".repeat(750_000)}\\""]`;
    expect((codec.decode(inside) as string[])[1]).toMatch(/^\\"\[\{/);
    const mixed = `[${Array(MAX - 1)
      .fill('{"k":"\\"{["}')
      .join(",")}]`;
    expect((codec.decode(mixed) as unknown[]).length).toBe(MAX - 1);
    expect(refusal(codec, `[${Array(MAX).fill('{"k":"\\\\"}').join(",")}]`).message).toMatch(/more than 1000000/);
  });

  it("a guest's codec decodes what the host sends it without weighing it", () => {
    expect((guest.decode(empties(MAX + 1)) as unknown[]).length).toBe(MAX);
    expect(() => guest.weigh(empties(MAX + 1))).not.toThrow();
  });

  // why: a host call's arguments are decoded on the host's thread: four in flight of 16 M
  // characters of `[{}…]` took the host's heap ~1.4 GB up.
  it("a host call's arguments of more than a million are refused before the host function runs", async () => {
    let called = 0;
    const bindings = new Bindings({ api: { get: () => called++ } });
    const answer = await bindings.dispatch(0, `[${empties(MAX)}]`);
    expect(answer.ok).toBe(false);
    const error = sharedCodec().decode(answer.text) as Error & { code?: string };
    expect(error.code).toBe("ERR_NOT_SERIALIZABLE");
    expect(error.message).toMatch(/^globals\.api\.get\(\) arguments: more than 1000000 objects and arrays/);
    expect(called).toBe(0);
    expect((await bindings.dispatch(0, `[${empties(MAX - 1)}]`)).ok).toBe(true);
    expect(called).toBe(1);
  });
});

describe("the host's own texts are not weighed", () => {
  // why: only what a guest sends is weighed; a host's data module of more than a million objects
  // and arrays was read on the host to list its names, and that read must not refuse it.
  it("a data import of more than a million objects still lists its names", () => {
    const big = Array.from({ length: 1_000_001 }, () => ({}));
    const bindings = new Bindings({}, { data: { items: big, size: 1 } });
    const sources = hostModuleSources(bindings.text);
    expect(sources.data).toMatch(/export \{ m0 as items, m1 as size \}/);
  });
});
