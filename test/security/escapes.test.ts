import { inspect, types } from "node:util";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type RunOptions, type Sandbox, createSandbox } from "../../src/index.js";
import { COMBINATIONS, differs } from "../conformance/matrix.js";
import { completed, failed } from "../conformance/results.js";

/**
 * Known sandbox-escape classes, each payload a guest module. Every test asserts both that no host
 * object was reached (the guest reports what it could see, and every Function-like constructor it
 * found is asked `typeof process`) and that the host is unchanged (prototypes, globals, env, flags).
 */

/** What a guest sees for [process, require, globalThis.process, Buffer, module]: all absent. */
const NOTHING = "undefined|undefined|undefined|undefined|undefined";

/**
 * Guest helpers prepended to every payload. `reach(F)` builds a function with constructor F and
 * runs it: a host `Function` would see `process` (and write its probe on the host's globalThis,
 * which the host snapshot catches). `plant(tag)` is the side effect a trap or getter performs: a
 * no-op in the guest realm, a changed `process.env` and host global if it ever ran on the host.
 */
const PRELUDE = `
const __body = "globalThis.__probe = [typeof process, typeof require, typeof globalThis.process, typeof Buffer, typeof module].join('|'); return globalThis.__probe";
const FN_NAMES = ["Function", "AsyncFunction", "GeneratorFunction", "AsyncGeneratorFunction"];
function here() { return [typeof process, typeof require, typeof globalThis.process, typeof Buffer, typeof module].join("|"); }
function plant(tag) { try { process.env.CORDON_PWNED = String(tag); } catch {} globalThis.__cordonPwned = tag; }
function reach(F) {
  globalThis.__probe = "not run";
  try { const r = F(__body)(); if (r && typeof r.next === "function") r.next(); } catch (e) { return "threw " + (e && e.name); }
  return globalThis.__probe;
}
function walk(...roots) {
  const seen = new Set(), ctors = new Set();
  const addCtor = (F) => { try { if (typeof F === "function" && FN_NAMES.includes(F.name)) ctors.add(F); } catch {} };
  const visit = (x, d) => {
    if (x === null || (typeof x !== "object" && typeof x !== "function") || seen.has(x) || d > 5) return;
    seen.add(x);
    if (typeof x === "function") addCtor(x.constructor);
    for (const k of ["constructor", "__proto__", "prototype", "caller", "callee", "cause", "errors"]) {
      let v; try { v = x[k]; } catch { continue; } visit(v, d + 1);
    }
  };
  for (const r of roots) { visit(r, 0); try { addCtor(r.constructor.constructor); } catch {} }
  return [...ctors].map(reach);
}
function report(...roots) { return { here: here(), probes: walk(...roots) }; }
function capture() {
  const saved = Error.prepareStackTrace;
  Error.prepareStackTrace = (_, callSites) => callSites;
  const cs = new Error("capture").stack;
  Error.prepareStackTrace = saved;
  return inspectCallSites(cs);
}
function inspectCallSites(cs) {
  const found = [], files = [], origins = [];
  let runtimeLeaks = 0;
  for (const c of cs) {
    const t = c.getThis(), f = c.getFunction(), file = c.getFileName();
    files.push(String(file));
    origins.push(String(c.getEvalOrigin()));
    if (t !== undefined) found.push(t);
    if (f !== undefined) found.push(f);
    if (file === "<cordon>" && (t !== undefined || f !== undefined)) runtimeLeaks++;
  }
  return { frames: cs.length, files, origins, runtimeLeaks, ...report(cs, cs[0], ...found) };
}
function callerResult(chain, self) { return { names: chain.map((c) => c.name), ...report(self, ...chain) }; }
// A SLOPPY function (made by Function) for the runtime to invoke; it walks arguments.callee.caller.
function callerProbe(done) {
  return Function("done", "result", "return function () { const chain = []; let f = arguments.callee; for (let i = 0; i < 20; i++) { let c; try { c = f.caller; } catch (e) { break; } if (!c) break; chain.push(c); f = c; } return done(result(chain, arguments.callee), arguments); }")(done, callerResult);
}
`;

interface Snapshot {
  protos: Record<string, string[]>;
  globals: string[];
  env: string[];
  prepareStackTrace: unknown;
  stackTraceLimit: number;
}

const protoNames = (o: object) => Reflect.ownKeys(o).map(String).sort();
function snapshot(): Snapshot {
  const protos = { Object, Array, Function, Promise, Error };
  return {
    protos: Object.fromEntries(Object.entries(protos).map(([k, v]) => [k, protoNames(v.prototype)])),
    globals: protoNames(globalThis),
    env: Object.keys(process.env).sort(),
    prepareStackTrace: Error.prepareStackTrace,
    stackTraceLimit: Error.stackTraceLimit,
  };
}

/** Host-side record of anything a planted callback could have triggered. */
const flags: string[] = [];
const received: unknown[][] = [];
const hostGlobals = {
  /** Called only by planted callbacks that must never run at all. */
  hostFlag: async (tag: unknown) => {
    flags.push(String(tag));
  },
  sink: async (...args: unknown[]) => {
    received.push(args);
    return { ok: true, count: args.length };
  },
  lookup: async (id: number) => ({
    id,
    user: { tags: ["a"], at: new Date(0), map: new Map([["k", { v: 1 }]]), bytes: new Uint8Array([1]) },
  }),
  failing: async () => {
    throw Object.assign(new RangeError("nope"), { status: 500, cause: new Error("inner") });
  },
};

async function expectHostUnchanged<T>(fn: () => Promise<T>): Promise<T> {
  const before = snapshot();
  const out = await fn();
  expect(snapshot()).toEqual(before);
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  expect(process.env.CORDON_PWNED).toBeUndefined();
  expect(flags).toEqual([]);
  return out;
}

const DATA_CTORS = [Object, Array, Date, Map, Set, ArrayBuffer, Uint8Array, Error, TypeError, RangeError, SyntaxError];
const ALLOWED_PROTOS = new Set<unknown>([
  null,
  ...[...DATA_CTORS, ReferenceError, EvalError, URIError, AggregateError].map((c) => c.prototype),
]);

/** Data only: no Proxy, no accessor, no function, no prototype the codec does not produce. */
function expectPlainData(value: unknown, path = "value", seen = new Set<unknown>()): void {
  expect(typeof value, path).not.toBe("function");
  if (value === null || typeof value !== "object" || seen.has(value)) return;
  seen.add(value);
  expect(types.isProxy(value), `${path} is a Proxy`).toBe(false);
  expect(ALLOWED_PROTOS.has(Object.getPrototypeOf(value)), `${path} has a foreign prototype`).toBe(true);
  for (const key of Reflect.ownKeys(value)) {
    const desc = Object.getOwnPropertyDescriptor(value, key)!;
    expect("value" in desc, `${path}.${String(key)} is an accessor`).toBe(true);
    expectPlainData(desc.value, `${path}.${String(key)}`, seen);
  }
  if (value instanceof Map) {
    for (const [k, v] of value) {
      expectPlainData(k, `${path}<key>`, seen);
      expectPlainData(v, `${path}<value>`, seen);
    }
  }
  if (value instanceof Set) for (const v of value) expectPlainData(v, `${path}<item>`, seen);
}

interface Report {
  here: string;
  probes: string[];
}
function expectNothingReached(report: Report): void {
  expect(report.here).toBe(NOTHING);
  expect(report.probes.length).toBeGreaterThan(0);
  for (const probe of report.probes) expect(probe).toBe(NOTHING);
}

/** A payload: the default export (`main`) plus optional module head (imports) and run options. */
interface Payload {
  name: string;
  head?: string;
  main: string;
  imports?: RunOptions["imports"];
  input?: unknown;
}

// ---- payload tables ------------------------------------------------------------------------------
const DB = { query: async () => 1, version: "1" };

/** `x.constructor.constructor(...)` from every object a guest can reach. */
// biome-ignore format: one payload per line reads as a table
const CONSTRUCTOR_WALKS: Payload[] = [
  { name: "globalThis via sloppy this", main: "() => report(Function('return this')(), (0, eval)('this'), globalThis)" },
  { name: "a new Error", main: "() => report(new Error('x'), new TypeError('t'))" },
  { name: "a promise and an async function", main: "() => report(Promise.resolve(1), (async () => 1)(), async function () {}, function* () {}, async function* () {})" },
  { name: "a bridged host function", main: "() => report(lookup, sink, hostFlag, lookup.call, lookup.bind(null))" },
  { name: "host-module exports", head: "import db, { query } from 'db';", main: "() => report(db, query, __cordon_module('db'))", imports: { db: DB } },
  { name: "a host module method's this", head: "import db from 'db';", main: "() => db.query.call(db).then(() => report(db))", imports: { db: DB } },
  { name: "values a host function returns", main: "async () => { const r = await lookup(1); return report(r, r.user, r.user.tags, r.user.at, r.user.map, r.user.map.get('k'), r.user.bytes) }" },
  { name: "the caught error of a failing host function", main: "async () => { try { await failing() } catch (e) { return report(e, e.cause) } }" },
  { name: "the run's input", main: "(input) => report(input, input.nested, input.d, input.e)", input: { nested: { a: [1] }, d: new Date(0), e: new Error("in") } },
  { name: "console and console.log", main: "() => report(console, console.log, console.error, console.assert)" },
  { name: "timers", main: "() => report(setTimeout, clearTimeout, setInterval, queueMicrotask)" },
  { name: "URL and URLSearchParams", main: "() => { const u = new URL('https://a.example/?q=1'); return report(URL, u, u.searchParams, URLSearchParams) }" },
  { name: "TextEncoder and TextDecoder", main: "() => report(TextEncoder, new TextEncoder(), new TextEncoder().encode('x'), new TextDecoder(), atob, btoa)" },
  { name: "crypto", main: "() => report(crypto, crypto.getRandomValues(new Uint8Array(4)), crypto.getRandomValues, crypto.randomUUID)" },
  { name: "structuredClone results", main: "() => { const c = structuredClone({ d: new Date(0), m: new Map([[1, {}]]), e: new Error('x') }); return report(structuredClone, c, c.d, c.m, c.e) }" },
  { name: "this inside a timer callback", main: "() => new Promise((r) => setTimeout(function () { r(report(this, arguments)) }, 1))" },
];

/** Error.prepareStackTrace / CallSite while runtime code is on the stack; `onStack`: a runtime frame must be visible. */
// biome-ignore format: one payload per line reads as a table
const STACK_TRACES: (Payload & { onStack: boolean; pick?: string })[] = [
  { name: "in a timer callback", onStack: true, main: "() => new Promise((r) => setTimeout(() => r(capture()), 1))" },
  { name: "in a Proxy trap console.log runs", onStack: true, main: "() => { let out; console.log(new Proxy({ x: 1 }, { ownKeys(t) { out = capture(); return Reflect.ownKeys(t) } })); return out }" },
  { name: "in an Error stack getter console.log reads", onStack: true, main: "() => { let out; const e = new Error('e'); Object.defineProperty(e, 'stack', { get() { out = capture(); return 's' } }); console.log(e); return out }" },
  { name: "in a getter of a host-call argument", onStack: true, main: "async () => { let out; await sink({ get x() { out = capture(); return 1 } }); return out }" },
  { name: "in a host-call continuation", onStack: false, main: "() => lookup(1).then(() => capture())" },
  { name: "in the valueOf of a timer delay", onStack: true, main: "() => { let out; clearTimeout(setTimeout(() => {}, { valueOf() { out = capture(); return 1 } })); return out }" },
  { name: "in a URL toString", onStack: true, main: "() => { let out; new URL({ toString() { out = capture(); return 'https://a.example/' } }); return out }" },
  { name: "in a structuredClone getter", onStack: true, main: "() => { let out; structuredClone({ get x() { out = capture(); return 1 } }); return out }" },
  { name: "in a thenable the runtime awaits", onStack: false, main: "() => ({ then(resolve) { resolve(capture()) } })" },
  { name: "in a getter of the result", onStack: true, pick: "b", main: "() => { let out; return { get a() { out = capture(); return 1 }, get b() { return out } } }" },
  { name: "with eval origins in a timer", onStack: true, main: "() => new Promise((r) => setTimeout(() => r(eval('eval(\"capture()\")')), 1))" },
  { name: "on a runtime-made error (ERR_NOT_SERIALIZABLE), global prepareStackTrace", onStack: true, main: "async () => { let out; Error.prepareStackTrace = (e, cs) => { out = inspectCallSites(cs); return 'x' }; try { await sink(() => 1) } catch (e) { e.stack } Error.prepareStackTrace = undefined; return out }" },

];

/** arguments.callee.caller and Function.prototype.caller from sloppy callbacks the runtime invokes. */
// biome-ignore format: one payload per line reads as a table
const CALLER_WALKS: Payload[] = [
  { name: "a timer callback", main: "() => new Promise((r) => setTimeout(callerProbe((x) => r(x)), 1))" },
  { name: "a host-call continuation", main: "() => lookup(1).then(callerProbe((x) => x))" },
  { name: "a getter invoked while encoding host-call arguments", main: "async () => { let out; const o = {}; Object.defineProperty(o, 'x', { enumerable: true, get: callerProbe((x) => { out = x; return 1 }) }); await sink(o); return out }" },
  { name: "an Error stack getter console.log reads", main: "() => { let out; const e = new Error('e'); Object.defineProperty(e, 'stack', { get: callerProbe((x) => { out = x; return 's' }) }); console.log(e); return out }" },
  { name: "a thenable's then the runtime awaits", main: "() => ({ then: callerProbe((x, args) => args[0](x)) })" },
  { name: "Function.prototype.caller on a sloppy timer callback", main: "() => new Promise((r) => setTimeout(Function('get', 'r', 'result', 'return function cb() { let c = null; try { c = get.call(cb) } catch (e) {} r(result(c ? [c] : [], cb)) }')(Object.getOwnPropertyDescriptor(Function.prototype, 'caller').get, r, callerResult), 1))" },

];

/** Values handed to the host as host-call arguments: the host must get plain data. */
// biome-ignore format: one payload per line reads as a table
const HOST_ARGUMENTS: Payload[] = [
  { name: "a Proxy whose traps plant", main: "() => sink(new Proxy({ a: 1 }, { get(t, k) { plant('get'); return Reflect.get(t, k) }, ownKeys(t) { plant('ownKeys'); return Reflect.ownKeys(t) }, getPrototypeOf(t) { plant('proto'); return Object.prototype } }))" },
  { name: "getters", main: "() => sink({ get secret() { plant('getter'); return 42 }, nested: { get deep() { return [1] } } })" },
  { name: "a Proxy around an array", main: "() => sink(new Proxy([1, 2], { get(t, k) { plant('arr'); return Reflect.get(t, k) } }))" },
  { name: "a class instance behind a Proxy that lies about its prototype", main: "() => { class Secret { x = 1 } return sink(new Proxy(new Secret(), { getPrototypeOf() { return Object.prototype } })) }" },
  { name: "an Array subclass with Symbol.species", main: "() => { class A extends Array { static get [Symbol.species]() { plant('species'); return Array } } return sink(A.from([1, 2]), new A(3).fill(0).map((x) => x)) }" },
  { name: "a typed-array subclass with Symbol.species", main: "() => { class U extends Uint8Array { static get [Symbol.species]() { plant('ta'); return Uint8Array } } return sink(new U([1, 2]).subarray(0)) }" },
  { name: "a patched Array[Symbol.species] and Promise[Symbol.species]", main: "() => { Object.defineProperty(Array, Symbol.species, { get() { plant('a'); return Object } }); Object.defineProperty(Promise, Symbol.species, { get() { plant('p'); return Promise } }); return sink([[1], { a: [2] }]).then((r) => r) }" },
  { name: "__proto__ and constructor.prototype keys", main: "() => sink(JSON.parse('{\"__proto__\": {\"polluted\": 1}, \"constructor\": {\"prototype\": {\"polluted\": 1}}}'), new Map([['__proto__', { polluted: 1 }]]))" },
  { name: "forged codec tags through a guest toJSON", main: "() => { Object.prototype.toJSON = function () { return { $: 't', t: 'constructor', v: 'AAAA' } }; return sink({ a: 1 }).catch(() => null).finally(() => { delete Object.prototype.toJSON }) }" },
];

/** Values handed to the host as the run's result. */
// biome-ignore format: one payload per line reads as a table
const RESULTS: Payload[] = [
  { name: "a Proxy", main: "() => new Proxy({ a: 1 }, { get(t, k) { plant('get'); return Reflect.get(t, k) }, ownKeys(t) { plant('keys'); return Reflect.ownKeys(t) } })" },
  { name: "getters and a Proxy named export", head: "export const px = new Proxy({ b: 2 }, { get(t, k) { plant('x'); return t[k] } });", main: "{ get a() { plant('a'); return 1 } }" },
  { name: "a Promise subclass with Symbol.species", main: "() => { class P extends Promise { static get [Symbol.species]() { plant('species'); return Promise } then(a, b) { plant('then'); return super.then(a, b) } } return new P((r) => r({ ok: 1 })) }" },
  { name: "a top-level thenable (awaited inside the guest)", main: "() => ({ then(resolve) { resolve({ via: 'then', ...report(resolve) }) } })" },
  { name: "a then getter", main: "() => ({ get then() { plant('then'); return undefined }, x: 1 })" },
  { name: "the inspect-custom symbol", main: "() => ({ a: 1, [Symbol.for('nodejs.util.inspect.custom')]: () => { hostFlag('inspect') }, [Symbol.toPrimitive]: () => { hostFlag('prim') } })" },
  { name: "__proto__ and constructor.prototype keys", main: "() => JSON.parse('{\"__proto__\": {\"polluted\": 1}, \"constructor\": {\"prototype\": {\"polluted\": 1}}, \"list\": [{\"__proto__\": {\"polluted\": 2}}]}')" },
  { name: "guest-polluted prototypes", main: "() => { Object.prototype.polluted = 1; Array.prototype.polluted = 1; Object.prototype.$ = 'd'; return { o: {}, a: [] } }" },
  { name: "a named export called __proto__", head: "const x = { polluted: 1 }; export { x as '__proto__' };", main: "1" },
];

/** Values that must NOT cross: the run fails ERR_NOT_SERIALIZABLE and the planted callback never runs. */
// biome-ignore format: one payload per line reads as a table
const REFUSED_RESULTS: Payload[] = [
  { name: "a nested thenable", main: "() => ({ data: { then() { hostFlag('nested-then') } } })" },
  { name: "a nested then getter returning a function", main: "() => ({ inner: { get then() { return () => hostFlag('then-getter') } } })" },
  { name: "a thenable resolving to a function", main: "() => ({ then(resolve) { resolve(() => hostFlag('fn')) } })" },
  { name: "an inspect-custom method as a value", main: "() => ({ inspect: () => hostFlag('inspect') })" },
];

/** Thrown errors smuggling functions, proxies and getters in cause / errors / fields. */
// biome-ignore format: one payload per line reads as a table
const THROWN: Payload[] = [
  { name: "a cause that is a function", main: "() => { throw new Error('x', { cause: () => hostFlag('cause') }) }" },
  { name: "a cause that is a Proxy", main: "() => { throw new Error('x', { cause: new Proxy({ a: 1 }, { get(t, k) { plant('cause'); return t[k] } }) }) }" },
  { name: "an AggregateError of proxies, functions and getters", main: "() => { throw new AggregateError([new Proxy({}, {}), () => hostFlag('agg'), { get g() { plant('g'); return 5 } }, new Error('inner', { cause: new Proxy([], {}) })], 'agg', { cause: () => hostFlag('aggcause') }) }" },
  { name: "a SuppressedError", main: "() => { const S = globalThis.SuppressedError ?? class SuppressedError extends Error { constructor(error, suppressed, m) { super(m); this.name = 'SuppressedError'; this.error = error; this.suppressed = suppressed } }; throw new S(() => hostFlag('err'), new Proxy({ s: 1 }, { get(t, k) { plant('supp'); return t[k] } }), 'sup') }" },
  { name: "a cause getter and a custom inspect", main: "() => { const e = new Error('x'); Object.defineProperty(e, 'cause', { get() { plant('cause'); return { fn: () => hostFlag('c') } } }); e[Symbol.for('nodejs.util.inspect.custom')] = () => hostFlag('inspect'); e.toString = () => hostFlag('ts'); throw e }" },
  { name: "an error thrown from a timer with function fields", main: "() => new Promise(() => setTimeout(() => { throw Object.assign(new Error('t'), { fn: () => hostFlag('t'), p: new Proxy({}, {}) }) }, 1))" },
  { name: "a Proxy thrown at module load", head: "throw new Proxy(new Error('load'), { get(t, k) { plant('load'); return t[k] } });", main: "1" },
  { name: "a prepareStackTrace that returns a Proxy as the error crosses", head: "Error.prepareStackTrace = () => new Proxy({}, { get() { plant('pst'); return () => 'p' } });", main: "() => new Promise(() => setTimeout(() => { throw new Error('t') }, 1))" },
];

describe.each(COMBINATIONS)("escapes on $name", (combo) => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await createSandbox(combo.options);
  });
  afterAll(async () => {
    await sandbox.dispose();
  });
  beforeEach(() => {
    flags.length = 0;
    received.length = 0;
  });

  const run = (p: Payload) =>
    sandbox.run({
      code: `${PRELUDE}\n${p.head ?? ""}\nexport default ${p.main};`,
      globals: hostGlobals,
      imports: p.imports,
      input: p.input,
    });

  describe("constructor walks", () => {
    it.each(CONSTRUCTOR_WALKS)("from $name", async (p) => {
      const value = await expectHostUnchanged(async () => completed(await run(p)).value as Report);
      expectNothingReached(value);
    });
  });

  describe("Error.prepareStackTrace and CallSites", () => {
    it.each(STACK_TRACES)("$name", async (p) => {
      if (differs(combo, "prepare-stack-trace")) {
        // The documented difference (matrix.ts): the V8 hook does not exist, so it is never
        // called and no CallSite exists; the stack stays a string and the host is unchanged.
        const probe = `() => { let called = false; Error.prepareStackTrace = () => { called = true; return []; };
          const stack = new Error("x").stack; return { called, type: typeof stack, ...report(globalThis) } }`;
        const value = await expectHostUnchanged(
          async () => completed(await run({ name: p.name, main: probe })).value as Report & { called: boolean; type: string },
        );
        expectNothingReached(value);
        expect(value.called).toBe(false);
        expect(value.type).toBe("string");
        return;
      }
      const result = await expectHostUnchanged(async () => completed(await run(p)).value as Record<string, unknown>);
      const value = (p.pick ? result[p.pick] : result) as Report & Record<string, unknown>;
      expectNothingReached(value);
      expect(value.frames).toBeGreaterThan(0);
      // Runtime frames are strict: they never hand out their function or receiver.
      expect(value.runtimeLeaks).toBe(0);
      const denoFiles = differs(combo, "callsite-files");
      // On deno a guest module's URL (in its private directory) may appear in an eval origin.
      const privateUrl = /file:\/\/\/[^\s)]*?\/cordon-deno-host-[^/]+\/p-[^/]+\/fn\//g;
      for (const origin of value.origins as string[]) {
        expect(denoFiles ? origin.replace(privateUrl, "") : origin).not.toMatch(/\/work|node:|file:|node_modules|isolated-vm/);
      }
      if (denoFiles) {
        // The documented difference (matrix.ts): guest modules are files of the private directory,
        // Deno's own web APIs are ext: modules, runtime frames belong to an eval'd script whose origin is <cordon>.
        for (const file of value.files as string[])
          expect(file).toMatch(/^(?:null|undefined|<guest>|ext:[\w/.]+|\/.*\/cordon-deno-host-[^/]+\/p-[^/]+\/fn\/.+)$/);
        if (p.onStack) expect(value.origins).toContain("<cordon>");
        return;
      }
      for (const file of value.files as string[]) expect(["<guest>", "<cordon>", "null", "undefined"]).toContain(file);
      if (p.onStack) expect(value.files).toContain("<cordon>");
    });
  });

  describe("caller walks", () => {
    it.each(CALLER_WALKS)("from $name", async (p) => {
      const value = await expectHostUnchanged(async () => completed(await run(p)).value as Report & { names: string[] });
      expectNothingReached(value);
      // Strict runtime frames end every caller chain: no runtime function is handed out.
      expect(value.names).toEqual([]);
    });
  });

  describe("values handed to the host as host-call arguments", () => {
    it.each(HOST_ARGUMENTS)("$name", async (p) => {
      await expectHostUnchanged(async () => completed(await run(p)));
      expect(received.length).toBeGreaterThan(0);
      for (const args of received) {
        expect(Object.getPrototypeOf(args)).toBe(Array.prototype);
        expectPlainData(args, "args");
        // Even naive host code that spreads or indexes what it got stays unpolluted.
        const spread = { ...(args[0] as object) } as Record<string, unknown>;
        expect(Object.getPrototypeOf(spread)).toBe(Object.prototype);
      }
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    });

    it("a thenable or a revoked Proxy as an argument never reaches the host", async () => {
      const main = `async () => { const out = [];
        for (const v of [{ then(r) { hostFlag('then'); r(1) } }, (() => { const p = Proxy.revocable({}, {}); p.revoke(); return p.proxy })()]) {
          try { await sink(v); out.push('sent') } catch (e) { out.push(e.code ?? e.name) } }
        return { out, ...report(sink) } }`;
      const value = await expectHostUnchanged(
        async () => completed(await run({ name: "", main })).value as Report & { out: string[] },
      );
      expectNothingReached(value);
      expect(value.out).toEqual(["ERR_NOT_SERIALIZABLE", "TypeError"]);
      expect(received).toEqual([]);
    });
  });

  describe("values handed to the host as the result", () => {
    it.each(RESULTS)("$name", async (p) => {
      const result = await expectHostUnchanged(async () => completed(await run(p)));
      expectPlainData(result.value);
      expectPlainData(result.exports, "exports");
      expect(Object.getOwnPropertySymbols(result.value ?? {})).toEqual([]);
      inspect(result, { depth: null, customInspect: true }); // the host formats it: nothing planted may run
      String(result.value);
      expect(flags).toEqual([]);
      if (result.value && typeof result.value === "object" && "probes" in result.value)
        expectNothingReached(result.value as Report);
    });

    it("codec tags forged through a guest toJSON decode to data or fail closed", async () => {
      const tags = [
        "{ $: 't', t: 'constructor', v: 'AAAA' }",
        "{ $: 't', t: '__proto__', v: '' }",
        "{ $: 'o', v: { ['__proto__']: { polluted: 1 } } }",
        "{ $: 'e', n: 'constructor', m: 'x' }",
      ];
      for (const forged of tags) {
        const main = `() => { Object.prototype.toJSON = function () { delete Object.prototype.toJSON; return ${forged} }; return { a: [1] } }`;
        const result = await expectHostUnchanged(() => run({ name: "", main }));
        if (result.status === "completed") expectPlainData(result.value);
        else expect(result.error.code, forged).toBe("ERR_INTERNAL");
      }
    });

    it("a replaced array iterator cannot forge a tag: a plain object with an own $ key stays data", async () => {
      // The codec looped over Object.keys with for…of: a guest iterator yielding an object whose
      // toString is "$" skipped the escape, and { $: "d", v: 0 } came back as a Date (a forged
      // 8M-digit BigInt held the host's thread for 1.5 s reading it).
      const head = `const realIter = Array.prototype[Symbol.iterator];
        function forge(obj) {
          const K = { toString() { return "$" } };
          const keys = Object.keys(obj);
          Array.prototype[Symbol.iterator] = function () {
            if (this.length === keys.length && this[0] === "$") return realIter.call([K, ...keys.slice(1)]);
            return realIter.call(this);
          };
          return obj;
        }`;
      const result = await expectHostUnchanged(async () =>
        completed(
          await run({
            name: "",
            head,
            main: `async () => { const sent = forge({ $: "s", v: [1] }); await sink(sent); return [forge({ $: "d", v: 0 }), forge({ $: "b", v: "7" })] }`,
          }),
        ),
      );
      expect(result.value).toEqual([
        { $: "d", v: 0 },
        { $: "b", v: "7" },
      ]);
      expect(received).toEqual([[{ $: "s", v: [1] }]]);
    });

    it("a BigInt crosses up to 100,000 characters; a longer one is ERR_NOT_SERIALIZABLE, refused in the guest", async () => {
      const ok = completed(await run({ name: "", main: "() => -(10n ** 99998n)" }));
      expect(ok.value).toBe(-(10n ** 99998n));
      const long = failed(await run({ name: "", main: "() => ({ big: 10n ** 100000n })" }));
      expect(long.error).toMatchObject({
        code: "ERR_NOT_SERIALIZABLE",
        message: expect.stringContaining("value.big is a BigInt of more than 100000 digits"),
      });
    });

    it.each(REFUSED_RESULTS)("$name is ERR_NOT_SERIALIZABLE and never called", async (p) => {
      const result = await expectHostUnchanged(async () => failed(await run(p)));
      expect(result.error.code).toBe("ERR_NOT_SERIALIZABLE");
      expectPlainData(result.error, "error");
    });

    it("a thenable or function named export is skipped, never called", async () => {
      const head = "export const t = { then() { hostFlag('export-then') } }; export const f = () => hostFlag('export-fn');";
      const result = await expectHostUnchanged(async () => completed(await run({ name: "", head, main: "() => here()" })));
      expect(result.value).toBe(NOTHING);
      expect(result.skippedExports.sort()).toEqual(["f", "t"]);
    });

    it("a logged value with inspect-custom, toString and getters is formatted inside the guest", async () => {
      const main = `() => { const custom = Symbol.for('nodejs.util.inspect.custom');
        console.log({ a: 1, [custom]: () => hostFlag('inspect'), get g() { plant('g'); return here() } });
        console.log(Object.assign(new Error('e'), { [custom]: () => hostFlag('err'), toString: () => hostFlag('ts') }));
        console.log(new Proxy({ p: 1 }, { getOwnPropertyDescriptor(t, k) { plant('p'); return { value: here(), writable: true, enumerable: true, configurable: true } } }));
        return report(console.log) }`;
      const result = await expectHostUnchanged(async () => completed(await run({ name: "", main })));
      expectNothingReached(result.value as Report);
      // A getter is named, never called (as Node prints it); a Proxy's traps run, in the guest.
      expect(result.logs.map((l) => l.message.split("\n")[0])).toEqual([
        "{ a: 1, g: [Getter] }",
        "Error: e",
        `{ p: "${NOTHING}" }`,
      ]);
      for (const log of result.logs) expect(typeof log.message).toBe("string");
    });
  });

  describe("thrown errors smuggling cause, errors and fields", () => {
    it.each(THROWN)("$name", async (p) => {
      const result = await expectHostUnchanged(async () => failed(await run(p)));
      expect(result.error.code).toBe("ERR_USER_CODE");
      expectPlainData(result.error, "error");
      inspect(result, { depth: null, customInspect: true });
      String(result.error.message);
      expect(flags).toEqual([]);
      expect(result.error.stack ?? "").not.toMatch(/\/work|node:|file:|node_modules|isolated-vm/);
    });

    // Found by this corpus: guestThrown once assigned fields (`fields[key] = value[key]`), so an own
    // "__proto__" field set the host-side object's prototype. Fields are now defined, never assigned.
    it("an own __proto__ error field does not become the prototype of result.error.fields", async () => {
      const main =
        "() => { const e = new Error('x'); e.code = 7; Object.defineProperty(e, '__proto__', { value: { admin: true }, enumerable: true }); throw e }";
      const result = await expectHostUnchanged(async () => failed(await run({ name: "", main })));
      const fields = result.error.fields as Record<string, unknown>;
      expect(fields.code).toBe(7);
      expect(Object.getPrototypeOf(fields)).toBe(Object.prototype);
      expect(fields.admin).toBeUndefined();
    });
  });

  describe("module loading", () => {
    it("dynamic import() of node: builtins, files, data: URLs and granted modules rejects", async () => {
      const specifiers = [
        "node:fs",
        "fs",
        "node:child_process",
        "node:process",
        "module",
        "node:vm",
        "cordon:entry",
        "db",
        "data:text/javascript,export default 1",
        "file:///etc/passwd",
        "./x.js",
      ];
      const main = `async () => { const out = [];
        for (const s of ${JSON.stringify(specifiers)}) { try { const m = await import(s); out.push('imported ' + Object.keys(m)) } catch (e) { out.push('rejected') } }
        return { out, ...report(globalThis) } }`;
      const value = await expectHostUnchanged(
        async () => completed(await run({ name: "", main, imports: { db: DB } })).value as Report & { out: string[] },
      );
      expectNothingReached(value);
      if (differs(combo, "dynamic-import") && differs(combo, "node-builtins")) {
        // The documented difference (matrix.ts): Deno's loader, under Deno's permissions.
        const loads = new Set(["node:fs", "fs", "node:child_process", "node:process", "module", "node:vm"]);
        loads.add("data:text/javascript,export default 1");
        expect(value.out).toEqual(specifiers.map((s) => (loads.has(s) ? expect.stringMatching(/^imported/) : "rejected")));
      } else if (differs(combo, "dynamic-import")) {
        // The documented difference (matrix.ts): only what a static import may load resolves.
        // cordon's internal name for the entry module ("cordon:entry") is not one.
        const granted = new Set(["db"]);
        expect(value.out).toEqual(specifiers.map((s) => (granted.has(s) ? expect.stringMatching(/^imported/) : "rejected")));
      } else {
        expect(value.out).toEqual(specifiers.map(() => "rejected"));
      }
    });

    it("no module is reachable by the engine's own name for it, from a module or from new Function", async () => {
      // why: QuickJS names an evaluation's modules `<n>⁣<name>` and hands back one it loaded
      // without asking the loader; from `new Function` (code with no tag to resolve against) a
      // guest imported its own entry, an import, and on a warm instance an earlier run's module.
      const tagged = ["1\u2063<guest>", "2\u2063<guest>", "1\u2063\u2063db", "\u2063db", "<guest>"];
      const main = `async () => { const out = [];
        const viaFunction = new Function("s", "return import(s)");
        for (const s of ${JSON.stringify(tagged)}) {
          for (const load of [(x) => import(x), viaFunction]) {
            try { await load(s); out.push('imported ' + s) } catch (e) { out.push('rejected') }
          }
        }
        return { out, ...report(globalThis) } }`;
      const value = await expectHostUnchanged(
        async () => completed(await run({ name: "", main, imports: { db: DB } })).value as Report & { out: string[] },
      );
      expectNothingReached(value);
      expect(value.out).toEqual(tagged.flatMap(() => ["rejected", "rejected"]));
    });

    it("a granted source module cannot dynamic-import either", async () => {
      const imports = { lib: "export const load = () => import('node:fs').then(() => 'imported', () => 'rejected');" };
      const value = await expectHostUnchanged(
        async () =>
          completed(
            await run({
              name: "",
              head: "import { load } from 'lib';",
              main: "async () => ({ r: await load(), ...report(load) })",
              imports,
            }),
          ).value as Report & { r: string },
      );
      expectNothingReached(value);
      // The documented difference (matrix.ts): on deno node:fs loads; Deno's permissions gate it.
      expect(value.r).toBe(differs(combo, "node-builtins") ? "imported" : "rejected");
    });

    it("a guest that throws a refused import()'s message throws its own error, not a missing module", async () => {
      // QuickJS kept the loader's last refusal on the instance and called any later failure with
      // that message a missing module: ERR_MODULE_NOT_FOUND, the guest's error name dropped,
      // for the rest of the instance's life (a prefix's later runs too).
      const refused = "let m; try { await import('nope') } catch (e) { m = e.message }";
      const bodies = [
        `${refused}\nthrow new TypeError(m);`,
        "import('nope').catch(() => {});\nthrow new Error(globalThis.m ?? 'x');",
        `export default async () => { ${refused}; return new Promise(() => setTimeout(() => { throw new Error(m) }, 1)) };`,
      ];
      for (const code of bodies) {
        const result = failed(await sandbox.run({ code, limits: { wallTimeMs: 5000 } }));
        expect(result.error.code, code).toBe("ERR_USER_CODE");
      }
      expect(failed(await sandbox.run({ code: `${refused}\nthrow new TypeError(m);` })).error.name).toBe("TypeError");
      await using prefix = await sandbox.prepare({ code: "export const x = 1;" });
      const first = await prefix.run({ code: `${refused}\nglobalThis.m = m;\nexport default () => typeof m;` });
      expect(completed(first).value).toBe("string");
      const later = failed(await prefix.run({ code: "await null;\nthrow new Error(globalThis.m);" }));
      expect(later.error.code).toBe("ERR_USER_CODE");
      // A static import that is refused stays what it is.
      expect(failed(await sandbox.run({ code: "import x from 'nope';\nexport default x;" })).error.code).toBe(
        "ERR_MODULE_NOT_FOUND",
      );
    });

    it("static imports of node: builtins and require lookalikes are ERR_MODULE_NOT_FOUND", async () => {
      // Each binding is used: TypeScript's transform drops unused imports.
      for (const [head, main] of [
        ["import { createRequire } from 'node:module';", "() => createRequire('/')('fs')"],
        ["import 'node:process';", "1"],
        ["import * as vm from 'vm';", "() => vm.runInThisContext('process')"],
        ["import x from 'file:///etc/passwd';", "x"],
        ["import require from 'require';", "() => require('fs')"],
        ["export { execSync } from 'node:child_process';", "1"],
      ]) {
        if (differs(combo, "node-builtins") && /node:|'vm'/.test(head)) {
          // The documented difference (matrix.ts): the builtin loads; nothing of the host is reached.
          const result = await expectHostUnchanged(() => run({ name: head, head, main }));
          expect(result.ok ? "completed" : result.error.code, head).not.toBe("ERR_MODULE_NOT_FOUND");
          continue;
        }
        const result = await expectHostUnchanged(async () => failed(await run({ name: head, head, main })));
        expect(result.error.code, head).toBe("ERR_MODULE_NOT_FOUND");
      }
    });

    it("no require, module, process or host globals by any spelling", async () => {
      const main = `() => ({ ...report(globalThis), names: [typeof require, typeof globalThis.require, typeof module, typeof exports, typeof __dirname, typeof __filename,
        typeof global, typeof Deno, typeof Bun, eval('typeof require'), Function('return typeof require')(), typeof import.meta.resolve, typeof import.meta.require],
        meta: Object.keys(import.meta) })`;
      const value = await expectHostUnchanged(
        async () => completed(await run({ name: "", main })).value as Report & { names: string[]; meta: string[] },
      );
      expectNothingReached(value);
      if (differs(combo, "deno-namespace")) {
        // The documented difference (matrix.ts): Deno's namespace and import.meta exist.
        const names = Array(13).fill("undefined");
        names[7] = "object";
        expect(value.names).toEqual(names);
        // A module without imports runs in its script form, where import.meta is empty.
        expect(value.meta).toEqual([]);
        return;
      }
      expect(new Set(value.names)).toEqual(new Set(["undefined"]));
      expect(value.meta).toEqual([]);
    });
  });

  describe("globalThis internals", () => {
    it("no __cordon_ global but the two guest-realm entry points", async () => {
      const main = `() => ({ ...report(globalThis.__cordon_entry, globalThis.__cordon_module),
        names: Object.getOwnPropertyNames(globalThis).filter((n) => n.startsWith('__cordon_')).sort(),
        symbols: Object.getOwnPropertySymbols(globalThis).map(String), entry: (({ writable, configurable }) => ({ writable, configurable }))(Object.getOwnPropertyDescriptor(globalThis, '__cordon_entry')) })`;
      const value = await expectHostUnchanged(
        async () => completed(await run({ name: "", main })).value as Report & Record<string, unknown>,
      );
      expectNothingReached(value);
      // Both are guest-realm closures of the runtime script: __cordon_entry starts this run's default
      // export with this run's own module namespace (one-shot), __cordon_module returns the host
      // modules granted to this run (their functions are guest functions that call by number).
      // The host callbacks (__cordon_log, __cordon_call, ...) are deleted before guest code runs.
      expect(value.names).toEqual(["__cordon_entry", "__cordon_module"]);
      expect(value.entry).toMatchObject({ writable: false, configurable: false });
    });

    it("forging __cordon_entry changes no other run's outcome", async () => {
      const forger = `__cordon_entry({ get default() { plant('entry'); return () => ({ forged: true, ...report(__cordon_entry) }) } });
        try { globalThis.__cordon_entry = () => 0 } catch {}
        setTimeout(() => { try { __cordon_entry({ default: 'late' }) } catch {} }, 5);
        try { __cordon_module('db') } catch {}
        await new Promise((r) => setTimeout(r, 40));`;
      const honest = "() => new Promise((r) => setTimeout(() => r({ honest: true, db: typeof __cordon_module('db') }), 60))";
      const [forged, other] = await expectHostUnchanged(() =>
        Promise.all([
          run({ name: "", head: forger, main: "() => 'real'" }),
          sandbox.run({ code: `export default ${honest}`, imports: { db: DB } }),
        ]),
      );
      // The forger only changes its own outcome, and only into data.
      expectNothingReached(completed(forged).value as Report);
      expectPlainData(completed(forged).value);
      expect(completed(other).value).toEqual({ honest: true, db: "object" });
      const after = completed(await sandbox.run({ code: "export default () => [typeof __cordon_module('db'), 'after']" }));
      expect(after.value).toEqual(["undefined", "after"]);
    });
  });
});
