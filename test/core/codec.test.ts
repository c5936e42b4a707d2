import vm from "node:vm";
import { describe, expect, it } from "vitest";
import { type Codec, codecSource, createCodec } from "../../src/core/codec.js";

const codec = createCodec();
const roundTrip = (value: unknown) => codec.decode(codec.encode(value));

describe("value codec", () => {
  it("round-trips the design's value set", () => {
    const value = {
      s: "text",
      n: 1.5,
      neg0: -0,
      nan: Number.NaN,
      inf: Number.POSITIVE_INFINITY,
      u: undefined,
      nul: null,
      b: true,
      big: 12345678901234567890n,
      date: new Date(1700000000000),
      bad: new Date(Number.NaN),
      map: new Map<unknown, unknown>([
        ["a", 1],
        [{ k: 1 }, [2]],
      ]),
      set: new Set([1, "two"]),
      bytes: new Uint8Array([0, 1, 254, 255]),
      f64: new Float64Array([1.5, -2]),
      buffer: new Uint8Array([9, 8, 7]).buffer,
      nested: [[1, [2, [3]]], { $: "looks like a tag", v: 1 }],
    };
    const out = roundTrip(value) as typeof value;
    expect(out).toEqual(value);
    expect(Object.is(out.neg0, -0)).toBe(true);
    expect(out.bytes).toBeInstanceOf(Uint8Array);
    expect(out.buffer).toBeInstanceOf(ArrayBuffer);
    expect(out.nested[1]).toEqual({ $: "looks like a tag", v: 1 });
  });

  it("keeps errors with name, message, cause and own fields", () => {
    const error = Object.assign(new RangeError("too far", { cause: new Error("root") }), { code: "E_FAR", status: 400 });
    const out = roundTrip(error) as RangeError & { code: string; status: number; cause: Error };
    expect(out).toBeInstanceOf(RangeError);
    expect(out.message).toBe("too far");
    expect(out.code).toBe("E_FAR");
    expect(out.status).toBe(400);
    expect(out.cause.message).toBe("root");
  });

  it("the host's decoder captures no stack for the errors it makes, and leaves stackTraceLimit as it was", () => {
    // why: each revived error captured a stack it then replaced, ~13 µs in a deep decode: 530,000
    // tiny Errors in one result held the host's loop 7.4 s (~1.6 µs each without).
    const host = createCodec(true);
    const limit = Error.stackTraceLimit;
    const many = `[${Array.from({ length: 200_000 }, () => '{"$":"e","n":"TypeError","m":"x","s":"S"}').join(",")}]`;
    const started = performance.now();
    const errors = host.decode(many) as TypeError[];
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(errors[0]).toBeInstanceOf(TypeError);
    expect([errors[0].message, errors[0].stack]).toEqual(["x", "S"]);
    expect(Error.stackTraceLimit).toBe(limit);
    // A malformed error midway leaves it as it was too.
    expect(() => host.decode('[{"$":"e","n":"Error","m":"a","f":{"x":{"$":"e","n":1}}}]')).toThrow();
    expect(Error.stackTraceLimit).toBe(limit);
  });

  it("a builtin is known by its brand: the prototype chain only picks which brand to check", () => {
    class Registry extends Map<number, number> {}
    class HttpError extends Error {}
    const cases: [unknown, unknown][] = [
      [new Registry([[1, 2]]), new Map([[1, 2]])],
      [Object.setPrototypeOf(new Map([[1, 2]]), Set.prototype), new Map([[1, 2]])],
      [Object.setPrototypeOf(new Set([1]), Date.prototype), new Set([1])],
      [Object.setPrototypeOf(new Date(5), ArrayBuffer.prototype), new Date(5)],
      [Object.setPrototypeOf(new Map([[1, 2]]), Error.prototype), new Map([[1, 2]])],
      [Object.setPrototypeOf(new Uint8Array([3]).buffer, Map.prototype), new Uint8Array([3]).buffer],
    ];
    for (const [value, expected] of cases) expect(roundTrip(value)).toEqual(expected);
    expect(roundTrip(new HttpError("x"))).toBeInstanceOf(Error);
    // An object that only borrowed Error.prototype has no own stack; it still crosses as an Error.
    expect((roundTrip(Object.create(Error.prototype)) as Error).name).toBe("Error");
    // A look-alike is not the builtin; a Proxy is no builtin at all.
    expect(() => codec.encode(Object.create(Map.prototype))).toThrow(/is an instance of Map/);
    expect(() => codec.encode(new Proxy(new Set([1]), {}))).toThrow(/ERR_NOT_SERIALIZABLE|is an instance of Set/);
  });

  it("refuses a typed array kind this realm cannot make, rather than reviving its bytes as another", () => {
    expect(() => codec.decode('{"$":"t","t":"Float16Array","v":"AAA="}')).toThrow(/Float16Array cannot be read/);
    expect(codec.decode('{"$":"t","t":"Int16Array","v":"AQA="}')).toEqual(new Int16Array([1]));
  });

  it("an array crosses as its elements, as in JSON: its other own properties stay behind (README)", () => {
    const match = "a1".match(/(?<digit>\d)/) as RegExpMatchArray;
    expect(Object.keys(roundTrip(match) as object)).toEqual(["0", "1"]);
    expect(roundTrip(Object.assign([1, 2], { x: 1 }))).toStrictEqual([1, 2]);
  });

  it("BigInts cross up to 100,000 characters; the bit-length bound refuses nothing under it", () => {
    const largest = 2n ** 332192n; // 100,000 digits
    expect(roundTrip(largest)).toBe(largest);
    expect(roundTrip(-(10n ** 99998n))).toBe(-(10n ** 99998n));
    for (const over of [-largest, 10n ** 100000n, 2n ** 332193n, 1n << 1000000n])
      expect(() => codec.encode({ big: over })).toThrow(/value\.big is a BigInt of more than 100000 digits/);
  });

  it("BigInts over 10,000 digits hold at most 1,000,000 digits in one value; shorter ones count as text", () => {
    // Red team, 2026-12-06: 160 BigInts of 100,000 digits (16 MB, under maxOutputBytes) held a
    // shared process worker 2.8 s: their decimal text costs more than its length.
    const big = 10n ** 99_999n + 7n; // 100,000 digits
    const ten = Array.from({ length: 10 }, () => big);
    expect(roundTrip(ten)).toStrictEqual(ten);
    expect(() => codec.encode([...ten, big])).toThrow(
      /^value\[10\] is one BigInt too many: a value holds at most 1000000 digits in BigInts of more than 10000 digits/,
    );
    // A negative one counts its sign; 10,000 characters or fewer do not count.
    const small = Array.from({ length: 2_000 }, (_, i) => 10n ** 9_998n + BigInt(i));
    expect(roundTrip([...ten, ...small])).toHaveLength(2_010);
    // Each encode has its own count.
    expect(roundTrip(ten)).toStrictEqual(ten);
    // Text from elsewhere (a guest's crafted answer) is refused unread past the same bound.
    const digits = big.toString();
    const crafted = JSON.stringify(Array.from({ length: 11 }, () => ({ $: "b", v: digits })));
    expect(() => codec.decode(crafted)).toThrow(/value\[10\] is one BigInt too many/);
    expect(codec.decode(JSON.stringify(Array.from({ length: 10 }, () => ({ $: "b", v: digits }))))).toHaveLength(10);
    // The guest realm's codec (its source, evaluated elsewhere) keeps the same bound.
    const realm = vm.createContext({ ten, big });
    const guest = vm.runInContext(`(${codecSource()})()`, realm) as Codec;
    expect(() => guest.encode(vm.runInContext("[...ten, big]", realm))).toThrow(/one BigInt too many/);
  });

  it("names the path of a value that cannot cross", () => {
    const owner = class Owner {};
    const bad = { items: [{ ok: 1 }, { owner: new owner() }] };
    expect(() => codec.encode(bad, "value")).toThrow(/value\.items\[1\]\.owner is an instance of Owner/);
    expect(() => codec.encode({ f: () => 1 }, "value")).toThrow(/value\.f is a function/);
    expect(() => codec.encode({ s: Symbol("x") }, "value")).toThrow(/value\.s is a symbol/);
    expect(() => codec.encode({ "a-b": [() => 1] }, "input")).toThrow(/input\["a-b"\]\[0\] is a function/);
    // A key may start with NUL: it is named as the key it is, not read as a path segment of the codec's own.
    expect(() => codec.encode({ "\0.admin": () => 1 })).toThrow(/^value\["\\u0000\.admin"\] is a function/);
    expect(() => codec.encode({ m: new Map([[1, { "\0[3]": Symbol() }]]) })).toThrow(
      /^value\.m<entry 0>\.value\["\\u0000\[3\]"\] is a symbol/,
    );
    expect(() => codec.encode(new Set([1, [Symbol()]]))).toThrow(/^value<item 1>\[0\] is a symbol/);
    try {
      codec.encode([() => 1]);
      expect.unreachable();
    } catch (error) {
      expect((error as { code: string }).code).toBe("ERR_NOT_SERIALIZABLE");
      expect((error as { path: string }).path).toBe("value[0]");
    }
  });

  it("refuses cycles and absurd depth with ERR_NOT_SERIALIZABLE", () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    expect(() => codec.encode(cyclic)).toThrow(/value\.self is a circular reference/);
    let deep: unknown = 1;
    for (let i = 0; i < 600; i++) deep = [deep];
    expect(() => codec.encode(deep)).toThrow(/nested deeper than 512/);
  });

  it("names a long path by its two ends in the message, and whole in error.path", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 600; i++) deep = [deep];
    const longKey = { ["k".repeat(5000)]: Symbol("s") };
    for (const value of [deep, longKey]) {
      let error: { message: string; path: string; code: string } | undefined;
      try {
        codec.encode(value, "args");
      } catch (caught) {
        error = caught as typeof error;
      }
      expect(error?.code).toBe("ERR_NOT_SERIALIZABLE");
      expect(error?.message.length).toBeLessThan(300);
      expect(error?.message).toMatch(/^args(\[0\]\[0\]|\.kkk)/);
      expect(error?.message).toMatch(/…\(\d+ characters\)…/);
      expect(error?.path.length).toBeGreaterThan(1000);
    }
  });

  it("an own __proto__ key crosses as data and pollutes nothing", () => {
    const text = '{"__proto__":{"polluted":true},"a":1}';
    const out = codec.decode(text) as Record<string, unknown>;
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.hasOwn(out, "__proto__")).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((out as { polluted?: unknown }).polluted).toBeUndefined();
    const back = codec.decode(codec.encode(out)) as Record<string, unknown>;
    expect(Object.hasOwn(back, "__proto__")).toBe(true);
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
  });

  it("stops encoding past the output budget with ERR_OUTPUT_TOO_LARGE", () => {
    const big = Array.from({ length: 1000 }, () => "x".repeat(1000));
    try {
      codec.encode(big, "value", 10_000);
      expect.unreachable();
    } catch (error) {
      expect((error as { code: string }).code).toBe("ERR_OUTPUT_TOO_LARGE");
    }
  });

  it("a text's written length is counted exactly, escapes and surrogate pairs across its chunks included", () => {
    // jsonLength counts with JSON.stringify 65,536 characters at a time: a pair split between
    // chunks would count 12 characters instead of 2.
    const texts = [
      `${"a".repeat(65_535)}\u{1F600}${"\u0001".repeat(10)}"\\\ud800${"b".repeat(70_000)}`,
      `${"\n".repeat(65_536)}\u{1F600}x`,
      `${"c".repeat(131_071)}\ud83d`,
    ];
    for (const text of texts) {
      const written = JSON.stringify(text).length;
      expect(text.length * 6 + 2).toBeGreaterThan(written); // the counting path, not the quick one
      expect(codec.encode(text, "value", written)).toBe(JSON.stringify(text));
      expect(() => codec.encode(text, "value", written - 1)).toThrow(/value is larger than the limit/);
      expect(codec.encode({ s: text }, "value", written + 16)).toContain(JSON.stringify(text));
      expect(() => codec.encode({ s: text }, "value", written + 3)).toThrow(/larger than the limit/);
    }
  });

  it("a primitive root crosses without a walk, within the budget, and no toJSON is consulted", () => {
    for (const value of ["text", 'q"\n', "", 0, 1.5, -0, Number.NaN, true, false, null, undefined, 10n]) {
      expect(Object.is(roundTrip(value), value), String(value)).toBe(true);
    }
    expect(() => codec.encode("x".repeat(100), "value", 50)).toThrow(/value is larger than the limit of 50 bytes/);
    // why: JSON.stringify calls toJSON on objects and BigInts only; a patched one must change nothing.
    const proto = String.prototype as unknown as { toJSON?: () => unknown };
    const numberProto = Number.prototype as unknown as { toJSON?: () => unknown };
    proto.toJSON = numberProto.toJSON = () => ({ $: "d", v: 0 });
    try {
      expect([codec.encode("a"), codec.encode(2)]).toEqual(['"a"', "2"]);
    } finally {
      delete proto.toJSON;
      delete numberProto.toJSON;
    }
  });

  it("encodeFast: plain data in the host's codec, undefined for anything that needs the walk", () => {
    const host = createCodec(true);
    const plain = [{ type: "page_view", n: 1.5, tags: ["a"], geo: { city: "Berlin" }, none: null }];
    expect(host.encodeFast(plain)).toBe(host.encode(plain));
    expect(host.decode(host.encodeFast(plain) as string)).toEqual(plain);
    const needWalk = [
      [new Request("http://127.0.0.1/")],
      [new Date(0)],
      [{ a: undefined }],
      [{ $: "d" }],
      // biome-ignore lint/suspicious/noSparseArray: a hole is what this case is about.
      [[1, , 3]],
      [Number.NaN],
      [new Map()],
      [Object.create({ inherited: 1 })],
      // Primitive children are checked inline: each kind JSON.stringify would change.
      [{ n: -0 }],
      [[-0]],
      [{ x: Number.POSITIVE_INFINITY }],
      [{ f: () => 1 }],
      [{ b: 1n }],
      [{ s: Symbol("s") }],
      [[undefined]],
      [{ toJSON: 1 }],
      [JSON.parse('{"__proto__": 1}')],
      [Object.setPrototypeOf([1], {})],
    ];
    for (const value of needWalk) expect(host.encodeFast(value), String(value)).toBeUndefined();
    const nullProto = Object.assign(Object.create(null), { a: [true, null, "x"] });
    expect(host.decode(host.encodeFast([nullProto]) as string)).toEqual([{ a: [true, null, "x"] }]);
    // The guest's codec (untrusted: a getter may answer differently on a second read) never takes it.
    expect(codec.encodeFast([{ a: 1 }])).toBeUndefined();
    expect(codec.encodeFast(7)).toBe("7");
  });

  it("encodes errors leniently: an unserializable field is described, not fatal", () => {
    const error = Object.assign(new Error("x"), { fn: () => 1 });
    const out = codec.decode(codec.encodeError(error)) as Error & { fn: unknown };
    expect(out.fn).toBe("[not serializable: a function]");
  });

  it("codecSource() is self-contained: in a bare realm it writes what the host's codec writes", () => {
    // why: engines inject this text into guest realms; a part that reached outside its own body
    // would fail there, or encode differently from the codec the host decodes with.
    const realm = vm.createContext({});
    const guest = vm.runInContext(`(${codecSource()})()`, realm) as Codec;
    const make = `({ d: new Date(5), m: new Map([[1, new Set([2n])]]), b: new Uint8Array([1, 2]), $: "x", e: new RangeError("r") })`;
    const hostValue = vm.runInThisContext(make);
    expect(guest.encode(vm.runInContext(make, realm), "value", Number.POSITIVE_INFINITY, false)).toBe(
      codec.encode(hostValue, "value", Number.POSITIVE_INFINITY, false),
    );
    expect(codec.decode(guest.encode(vm.runInContext(make, realm)))).toEqual(hostValue);
    expect(() => guest.encode(vm.runInContext("({ items: [{ f: () => 1 }] })", realm))).toThrow(
      /value\.items\[0\]\.f is a function/,
    );
  });
});
