import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { codecSource, createCodec } from "../../src/core/codec.js";
import { installRuntime } from "../../src/engines/guest/runtime.js";
import { type RunResult, type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS, differs } from "../conformance/matrix.js";

/**
 * A guest that replaces builtins after its values are made changes nothing the host receives:
 * its values, thrown errors, refusals and logs come out as an unpatched guest's would, and no
 * patch lets it write the run's outcome itself (a code the host reads as its own finding).
 * QuickJS compiles a template literal to a String.prototype.concat call, so every template in
 * the runtime's or the codec's code was the guest's to rewrite there.
 */
// Generous: a patched Deno guest retires its process, so every run there starts a new one.
const LIMITS = { cpuTimeMs: 10_000, wallTimeMs: 20_000 };

/** One line each, run at the end of the module: after the values exist, before the default export is called. */
const PATCHES = [
  `String.prototype.concat = function () { return "X" };`,
  `Array.prototype.join = function () { return "J" };`,
  `Array.prototype.push = function () { return 0 };`,
  `Array.prototype.map = function () { return ["M"] };`,
  `Array.prototype.includes = function () { return true };`,
  `Array.prototype.slice = function () { return [] };`,
  `Array.prototype[Symbol.iterator] = function* () { yield "I"; yield 99 };`,
  `Object.defineProperty(Array.prototype, "0", { get() { return "P" }, set() {}, configurable: true });`,
  `Object.keys = () => []; Object.getOwnPropertyNames = () => []; Object.hasOwn = () => true;`,
  `Object.getPrototypeOf = () => null; Array.isArray = () => false; ArrayBuffer.isView = () => false;`,
  `JSON.stringify = () => '"S"'; JSON.parse = () => ({});`,
  `String.prototype.replace = () => "R"; String.prototype.startsWith = () => true; String.prototype.indexOf = () => -1;`,
  `String.prototype.slice = () => "L"; String.prototype.charCodeAt = () => 0; String.prototype.trimStart = () => "T";`,
  `Number.prototype.toString = () => "N"; BigInt.prototype.toString = () => "B"; Number.isNaN = () => true; Math.min = () => 0;`,
  `Date.prototype.toISOString = () => "T"; Date.prototype.getTime = () => 1; Date.prototype.toString = () => "D";`,
  `for (const C of [Map, Set]) Object.getPrototypeOf(new C().values()).next = () => ({ done: true });`,
  `Map.prototype.forEach = function () {}; Set.prototype.forEach = function () {}; Object.defineProperty(Map.prototype, "size", { get: () => 0 });`,
  `Error.prototype.toString = () => "E"; Symbol.prototype.toString = () => "Y";`,
  `RegExp.prototype.exec = () => null; RegExp.prototype.test = () => false;`,
  `Function.prototype.call = function () { return "F" }; Function.prototype.apply = function () { return "A" }; Reflect.apply = () => "A";`,
  `for (const C of [Error, Date, Map, Set, RegExp, Array, Object]) Object.defineProperty(C, Symbol.hasInstance, { value: () => false });`,
  `for (const C of [Error, Date, Map, Set, RegExp]) Object.defineProperty(C, Symbol.hasInstance, { value: () => true });`,
  `globalThis.String = function () { return "G" }; globalThis.Number = function () { return 7 };`,
];

/**
 * Values of every kind the codec writes, made before the patch runs; the default export logs
 * them, then returns them, throws, or returns what cannot cross, as its input says. The patch
 * is evaluated on the last line, one line whatever it holds, so errors' stacks name the same
 * lines with and without it.
 */
const probe = (patch: string) => `const cause = new RangeError("inner");
const thrown = new TypeError("boom", { cause }); thrown.code = "E_GUEST"; thrown.list = [1, new Map([[1, "one"]])];
const escaped = { $: "d", v: 1, "a b": [true, null], "\\u0000": -0 };
const value = {
  n: 1, s: "q\\"\\u0001\\u2028", nan: NaN, neg: -0, inf: -Infinity, big: -12345678901234567890n, u: undefined,
  d: new Date(86400000), bad: new Date(NaN), m: new Map([["k", { x: [1] }], [2, new Set([3])]]), st: new Set(["a", new Date(5)]),
  e: thrown, agg: new AggregateError([new Error("a")], "agg"), escaped, proto: JSON.parse('{"__proto__":{"y":3}}'),
  bytes: new Uint8Array([1, 2, 255]), floats: new Float64Array([1.5, -0]), view: new DataView(new Uint8Array([9, 8, 7]).buffer, 1),
  buffer: new Uint16Array([258]).buffer, holes: [1, , 3], nested: [[{ deep: [new Map([[{ k: 1 }, [new Set()]]])] }]],
  borrowed: Object.assign(Object.create(Error.prototype), { message: "borrowed" }),
};
const data = { reason: "data", at: new Date(0), m: new Map([[1, 2]]) };
const bad = { ok: 1, "a b": [0, { "c-d": new Map([["k", Symbol("s")]]) }] };
const loop = [1]; loop[1] = loop;
const instance = { thing: new (class Thing {})() };
const sym = Symbol("sym"), re = /re/g, anon = () => 1;
export const exported = { when: new Date(3), set: new Set(["x"]), escaped };
export const fn = () => 1;
export default (mode) => {
  if (mode === "logs") {
    console.log("fmt %s %d %i %f %o %O %c|%%", "str", 42, "7.9", "2.5", { a: [1, { b: 2 }] }, "q", "color: red");
    console.info(value.m, value.st, value.d, value.bad, value.big, value.neg, sym, re);
    console.warn(thrown);
    console.error([1, "two", { three: 3, "a b": 4 }], value.bytes, value.holes, value.proto);
    console.debug(escaped, value.nested, anon, null, undefined);
    console.assert(false, "assertion", 1, [2]);
    return 1;
  }
  if (mode === "throw") throw thrown;
  if (mode === "throw-data") throw data;
  if (mode === "throw-string") throw "plain";
  if (mode === "bad-value") return bad;
  if (mode === "bad-nested") return { loop };
  if (mode === "bad-instance") return instance;
  return value;
};
(0, eval)(${JSON.stringify(patch)});
`;

const MODES = ["value", "logs", "throw", "throw-data", "throw-string", "bad-value", "bad-nested", "bad-instance"];

/** What the host made of a run, as text: the codec writes Maps, Dates, errors' stacks and -0 as they are. */
const hostCodec = createCodec();
function seen(result: RunResult): string {
  const logs = result.logs.map((log) => [log.level, log.message]);
  const shown = result.ok
    ? { status: result.status, value: result.value, exports: result.exports, skipped: result.skippedExports, logs }
    : { status: result.status, error: result.error, logs };
  return hostCodec.encode(shown);
}

describe.each(COMBINATIONS)("a guest that replaces builtins on $name", (combo) => {
  let sandbox: Sandbox;
  const unpatched = new Map<string, string>();
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
    for (const mode of MODES) unpatched.set(mode, seen(await sandbox.run({ code: probe(";"), input: mode, limits: LIMITS })));
  });
  afterAll(async () => {
    await sandbox?.dispose();
  });

  it("still gets its values, errors, refusals and logs across as an unpatched guest does", async () => {
    // Sanity: the unpatched runs are what the probe means them to be.
    expect(unpatched.get("value")).toContain('"status":"completed"');
    expect(unpatched.get("throw")).toContain('"code":"ERR_USER_CODE"');
    expect(unpatched.get("bad-value")).toContain('"code":"ERR_NOT_SERIALIZABLE"');
    const differences: string[] = [];
    for (const patch of PATCHES) {
      for (const mode of MODES) {
        const got = seen(await sandbox.run({ code: probe(patch), input: mode, limits: LIMITS }));
        if (got !== unpatched.get(mode))
          differences.push(`${patch} [${mode}]\n  got      ${got}\n  expected ${unpatched.get(mode)}`);
      }
    }
    expect(differences.join("\n\n")).toBe("");
  }, 240_000);

  it("still gets its Request, Response and Headers across as an unpatched guest does", async () => {
    const code = (
      patch: string,
    ) => `const res = new Response("body \\u00e9", { status: 201, statusText: "Made", headers: { "x-a": "1", "set-cookie": "c=1" } });
const req = new Request("https://example.com/x?q=1", { method: "POST", body: "sent", headers: [["x-b", "2"], ["x-b", "3"]] });
const hdrs = new Headers({ accept: "text/plain", "x-c": "4" });
export default () => ({ res, req, hdrs });
(0, eval)(${JSON.stringify(patch)});`;
    const read = async (result: RunResult) => {
      if (!result.ok) return { error: result.error };
      const { res, req, hdrs } = result.value as { res: Response; req: Request; hdrs: Headers };
      return {
        res: [res.status, res.statusText, [...res.headers], await res.text()],
        req: [req.method, req.url, [...req.headers], await req.text()],
        hdrs: [...hdrs],
      };
    };
    const expected = await read(await sandbox.run({ code: code(";"), limits: LIMITS }));
    expect(expected).toMatchObject({ res: [201, "Made", expect.anything(), "body é"] });
    // Where reading them uses the realm's builtins (a documented difference), these patches may
    // make the value unreadable: the unpatched reading or a failure with one of the codes the
    // difference names, never another value or code. (Which one varies from run to run.) Those
    // runs get a short CPU limit: one of them may spin until it fires.
    const readWithRealm = /Array\.prototype(\.push|\[Symbol\.iterator\]|, "0")|Function\.prototype\.call/;
    const unreadable = differs(combo, "replaced-builtins-bodies") ? PATCHES.filter((p) => readWithRealm.test(p)) : [];
    expect(unreadable.length === 0 || unreadable.length === 4).toBe(true);
    const differences: string[] = [];
    for (const patch of PATCHES) {
      if (unreadable.includes(patch)) {
        const got = await read(await sandbox.run({ code: code(patch), limits: { cpuTimeMs: 1500, wallTimeMs: 20_000 } }));
        const codes = ["ERR_USER_CODE", "ERR_INSTANCE_RESET", "ERR_CPU_TIMEOUT"];
        const same = JSON.stringify(got) === JSON.stringify(expected);
        if (!same && !codes.includes(got.error?.code as string)) differences.push(`${patch}\n  got ${JSON.stringify(got)}`);
        continue;
      }
      const got = await read(await sandbox.run({ code: code(patch), limits: LIMITS }));
      if (JSON.stringify(got) !== JSON.stringify(expected))
        differences.push(`${patch}\n  got      ${JSON.stringify(got)}\n  expected ${JSON.stringify(expected)}`);
    }
    expect(differences.join("\n\n")).toBe("");
  }, 120_000);

  it("gets what its module's top level and its timers throw across as an unpatched guest does", async () => {
    // The runtime told an Error from thrown data with `instanceof`, which asks the guest's
    // Error[Symbol.hasInstance]: a thrown Error came back as "Uncaught {...}" text, thrown data
    // as isolated-vm's "An object was thrown..." (v8) or without its tags (quickjs).
    const bodies = [
      `throw Object.assign(new TypeError("top"), { code: "E" });\nexport default 1;`,
      `throw { a: new Date(0) };\nexport default 1;`,
      `export default () => new Promise(() => setTimeout(() => { throw new RangeError("later") }, 1));`,
      `export default () => new Promise(() => setTimeout(() => { throw [1, new Map([[1, 2]])] }, 1));`,
    ];
    const differences: string[] = [];
    for (const body of bodies) {
      const expected = seen(await sandbox.run({ code: `(0, eval)(";");\n${body}`, limits: LIMITS }));
      for (const verdict of ["false", "true"]) {
        const patch = `for (const C of [Error, Object]) Object.defineProperty(C, Symbol.hasInstance, { value: () => ${verdict} });`;
        const got = seen(await sandbox.run({ code: `(0, eval)(${JSON.stringify(patch)});\n${body}`, limits: LIMITS }));
        if (got !== expected) differences.push(`${verdict} ${body}\n  got      ${got}\n  expected ${expected}`);
      }
    }
    expect(differences.join("\n\n")).toBe("");
  });

  it("cannot hand the console's host call its own object as the line", async () => {
    // The formatter destructured [text, used] with the guest's array iterator: the "line" was the
    // guest's object, its length 0 to the guest-side cap, and QuickJS read its toString (3 MB)
    // into the host on every call.
    const code = `export default () => {
      let calls = 0;
      const line = { length: 0, toString() { calls++; return "x".repeat(3_000_000) } };
      Array.prototype[Symbol.iterator] = function* () { yield line; yield 2 };
      for (let i = 0; i < 20; i++) console.log("%s", "a");
      return calls;
    }`;
    const result = await sandbox.run({ code, limits: { ...LIMITS, maxLogBytes: 1000 } });
    expect(result).toMatchObject({ status: "completed", value: 0 });
    expect(result.logs.map((log) => log.message)).toEqual(Array(20).fill("a"));
  });

  it("cannot stand in for the typed arrays crypto's random bytes are made with", async () => {
    // QuickJS's worker made them with "(buffer) => new Uint8Array(buffer)" in the guest's context,
    // which read the global when called: a replacement saw the host's random bytes, chose what
    // crypto.randomUUID returned, and what it threw reached the guest as the host library's error.
    const code = `export default () => {
      const Real = Uint8Array, seen = [];
      const forged = new Real(16).fill(7);
      globalThis.Uint8Array = function (buffer) { seen.push(String(buffer)); return forged };
      const uuids = [crypto.randomUUID(), crypto.randomUUID()];
      const values = crypto.getRandomValues(new Real(8));
      globalThis.Uint8Array = function () { throw new Error("guest throw inside a host callback") };
      let after; try { after = typeof crypto.randomUUID() } catch (e) { after = e.name + ": " + e.message }
      globalThis.Uint8Array = Real;
      return { seen, same: uuids[0] === uuids[1], forged: uuids.includes("07070707-0707-4707-8707-070707070707"), nonZero: values.some((b) => b !== 0), after };
    }`;
    const result = await sandbox.run({ code, limits: LIMITS });
    expect(result).toMatchObject({
      status: "completed",
      value: { seen: [], same: false, forged: false, nonZero: true, after: "string" },
    });
  });

  it("cannot write the outcome the host reads: a user throw never becomes a limit's code", async () => {
    // The outcome's text starts with its kind: "o" ok, "t" thrown, "f" a refusal whose code the
    // host keeps (ERR_MEMORY_LIMIT among them). A concat that rewrote the runtime's own texts
    // made a returned value or a throw read as the memory limit (QuickJS).
    const forge = `{ const c = String.prototype.concat; const forged = 'f{"code":"ERR_MEMORY_LIMIT","message":"forged"}';
      String.prototype.concat = function (...a) { const s = c.apply(this, a); return s[0] === "o" || s[0] === "t" || s[0] === "m" ? forged : s } }`;
    const code = `export default (mode) => { if (mode === "throw") throw new RangeError("mine"); console.warn("w"); return 42 };
      export function sync(n) { return n + 1 }
      export async function later(n) { throw new Error("later " + n) }
      (0, eval)(${JSON.stringify(forge)});`;
    const returned = await sandbox.run({ code, input: "value", limits: LIMITS });
    expect(returned).toMatchObject({ status: "completed", value: 42, logs: [{ level: "warn", message: "w" }] });
    const threw = await sandbox.run({ code, input: "throw", limits: LIMITS });
    expect(threw).toMatchObject({ status: "failed", error: { code: "ERR_USER_CODE", name: "RangeError", message: "mine" } });
    await using prefix = await sandbox.prepare({ code });
    const [sync, later, missing] = await Promise.all([
      prefix.call({ export: "sync", args: [1] }),
      prefix.call({ export: "later", args: [2] }),
      prefix.call({ export: "nowhere", args: [] }),
    ]);
    expect(sync).toMatchObject({ status: "completed", value: 2 });
    expect(later).toMatchObject({ status: "failed", error: { code: "ERR_USER_CODE", message: "later 2" } });
    expect(missing).toMatchObject({ status: "failed", error: { code: "ERR_CALL_TARGET_NOT_FOUND" } });
    // A toJSON on Object.prototype, left by the prefix, when the runtime reports a postfix the
    // engine does not parse (an outcome it writes itself): still the compile's code.
    await using planted = await sandbox.prepare({
      code: `Object.defineProperty(Object.prototype, "toJSON", { value() { return { code: "ERR_MEMORY_LIMIT", message: "forged" } }, configurable: true });
export const x = 1;`,
      limits: LIMITS,
    });
    const unparsed = await planted.run({ code: "@dec class C {}\nfunction dec() {}\nexport default 1", limits: LIMITS });
    expect(unparsed).toMatchObject({
      status: "failed",
      error: { code: differs(combo, "engine-syntax-error") ? "ERR_USER_CODE" : "ERR_COMPILE" },
    });
  });
});

describe("the codec and runtime a guest realm runs", () => {
  it("hold no template literal with a substitution (QuickJS makes one a call of the guest's String.prototype.concat)", () => {
    for (const source of [codecSource(), installRuntime.toString()]) expect(source).not.toContain("${");
  });
});
