import vm from "node:vm";
import { describe, expect, it } from "vitest";
import { createHostServices } from "../../src/engines/host-services.js";
import { installWebApis, type WebApiDeps } from "../../src/engines/guest/web-apis.js";

// The function is injected as source text into a fresh realm, exactly as the engine does, with
// the host side of `deps` implemented on Node's URL and crypto. Each check then runs the same
// snippet in that realm and in Node itself and compares the JSON results.

// The host side is the engines' own: the same URL parsing and random bytes they lend a guest.
const deps: WebApiDeps = { ...createHostServices(), clone: (v) => structuredClone(v) };

function makeRealm(): vm.Context {
  const ctx = vm.createContext({ __deps: deps });
  vm.runInContext(`(${installWebApis.toString()})(globalThis, __deps); delete globalThis.__deps;`, ctx);
  return ctx;
}

const realm = makeRealm();

/** Runs a function body; the result (or the thrown error's name) comes back as JSON. */
const wrap = (body: string) =>
  `(() => { try { return JSON.stringify({ ok: (() => { ${body} })() }); } catch (e) { return JSON.stringify({ error: e && e.name }); } })()`;
const inRealm = (body: string, ctx: vm.Context = realm): unknown => JSON.parse(vm.runInContext(wrap(body), ctx));
const inNode = (body: string): unknown => JSON.parse(vm.runInThisContext(wrap(body)));

function same(body: string): void {
  expect(inRealm(body), body).toEqual(inNode(body));
}

const q = (v: unknown) => JSON.stringify(v);

describe("installWebApis", () => {
  it("installs non-enumerable, writable, configurable globals", () => {
    const out = inRealm(`return ["URL","URLSearchParams","TextEncoder","TextDecoder","atob","btoa","structuredClone","crypto"]
      .map((k) => { const d = Object.getOwnPropertyDescriptor(globalThis, k); return [k, typeof d.value, d.enumerable, d.writable, d.configurable]; })`);
    expect(out).toEqual({
      ok: [
        ["URL", "function", false, true, true],
        ["URLSearchParams", "function", false, true, true],
        ["TextEncoder", "function", false, true, true],
        ["TextDecoder", "function", false, true, true],
        ["atob", "function", false, true, true],
        ["btoa", "function", false, true, true],
        ["structuredClone", "function", false, true, true],
        ["crypto", "object", false, true, true],
      ],
    });
  });

  it("removes SharedArrayBuffer, Atomics and WebAssembly", () => {
    expect(vm.runInContext("typeof WebAssembly", vm.createContext({}))).toBe("object");
    expect(inRealm(`return [typeof SharedArrayBuffer, typeof Atomics, typeof WebAssembly, "WebAssembly" in globalThis]`)).toEqual(
      {
        ok: ["undefined", "undefined", "undefined", false],
      },
    );
  });

  it("matches Node's class shapes", () => {
    same(`return [Object.prototype.toString.call(new URL("http://a")), Object.prototype.toString.call(new URLSearchParams()),
      Object.prototype.toString.call(new URLSearchParams().keys()), URL.length, URLSearchParams.length, TextDecoder.length,
      String(new URLSearchParams("a=1")), JSON.stringify({ u: new URL("http://a/b") })]`);
  });
});

describe("URL", () => {
  const cases: [string, string?][] = [
    ["https://user:pa ss@EXAMPLE.com:443/a/../b/./c?x=1 2&y=é#frag ment"],
    ["http://[::1]:8080/p?q#h"],
    ["HTTP://xn--nxasmq6b.com/%7e"],
    ["http://münchen.de/straße"],
    ["file:///C:/dir/../file.txt"],
    ["mailto:someone@example.com?subject=hi there"],
    ["data:text/plain,hello world"],
    ["blob:https://a.example/uuid"],
    ["javascript:alert(1)"],
    ["../up?x#y", "https://a.example/b/c/d"],
    ["//other.example/p", "https://a.example/"],
    ["?only", "https://a.example/path?old#h"],
    ["#only", "https://a.example/path?old"],
    ["https://a.example:65536/"],
    ["not a url"],
    [""],
    ["http://"],
    ["https://exa mple.com/"],
    ["relative/path"],
    ["x", "not a base"],
    ["http://a.example/\uD800\uDC00\uD800"],
    ["http://1.2.3.4.5/"],
    ["http://0x7f.1/"],
    // The host answers with the href and each part's length: the parts around empty ones.
    ["http://a.example/?"],
    ["http://a.example/#"],
    ["http://a.example/?#"],
    ["foo://h:5/p?#"],
    ["data:,?#"],
    ["web+demo:/.//not-a-host/"],
    ["http://:pass@a.example:81/"],
    ["ftp://user@a.example/"],
    ["ws://a.example:81/x"],
    ["wss://[::1]/"],
    ["blob:https://a.example:8080/uuid"],
    ["blob:file:///x"],
    ["blob:foo"],
    ["file://host/share/x"],
    ["sc://ñ/x?ü#ö"],
  ];

  it.each(cases)("parses %j (base %j) like Node", (input, base) => {
    const args = base === undefined ? q(input) : `${q(input)}, ${q(base)}`;
    same(`const u = new URL(${args}); return [u.href, u.origin, u.protocol, u.username, u.password, u.host, u.hostname,
      u.port, u.pathname, u.search, u.hash, String(u), u.toJSON(), [...u.searchParams]]`);
    same(`return URL.canParse(${args})`);
  });

  it("reports invalid URLs as TypeError with the input in the message", () => {
    expect(
      inRealm(`try { new URL("nope"); } catch (e) { return [e instanceof TypeError, e.message, e.code, e.input]; }`),
    ).toEqual({
      ok: [true, "Invalid URL: nope", "ERR_INVALID_URL", "nope"],
    });
    expect(inRealm(`return [URL.parse("nope"), URL.parse("/p", "http://a").href]`)).toEqual({ ok: [null, "http://a/p"] });
    same(`return new URL()`);
  });

  const setters: [string, string, string][] = [
    ["https://a.example/p?x=1#h", "pathname", "/a b/ü"],
    ["https://a.example/p?x=1#h", "search", "?q=1 2&r=%zz"],
    ["https://a.example/p?x=1#h", "search", ""],
    ["https://a.example/p?x=1#h", "search", "?"],
    ["https://a.example/p?x=1#h", "hash", "#new hash"],
    ["https://a.example/p?x=1#h", "hash", ""],
    ["https://a.example/p", "host", "b.example:8080"],
    ["https://a.example/p", "hostname", "c.example"],
    ["https://a.example/p", "port", "443"],
    ["https://a.example/p", "port", "8443"],
    ["https://a.example/p", "port", "99999"],
    ["https://a.example/p", "protocol", "http"],
    ["https://a.example/p", "protocol", "mailto"],
    ["https://a.example/p", "username", "us er"],
    ["https://a.example/p", "password", "p@ss"],
    ["https://a.example/p?x=1", "href", "http://b.example/q?y=2&y=3"],
    ["https://a.example/p", "href", "not a url"],
  ];

  it.each(setters)("on %j sets %s = %j like Node, keeping searchParams in sync", (href, part, value) => {
    same(`const u = new URL(${q(href)}); const sp = u.searchParams; u[${q(part)}] = ${q(value)};
      return [u.href, u.search, [...sp], sp.toString(), u.searchParams === sp]`);
  });

  it("writes searchParams mutations back to the URL", () => {
    same(`const u = new URL("https://a.example/p?a=1&b=2#frag"); const sp = u.searchParams; const log = [];
      sp.append("c", "3 4+é"); log.push(u.href);
      sp.set("a", "x"); log.push(u.href);
      sp.delete("b"); log.push(u.href, u.search);
      sp.sort(); log.push(u.href);
      sp.delete("a"); sp.delete("c"); log.push(u.href, u.search, sp.size);
      u.search = "?z=9"; log.push([...sp], sp.get("z"));
      u.href = "https://b.example/?k=v"; log.push([...sp]);
      return log;`);
  });

  // The host's limits (test/engines/host-services.test.ts): an href of 1 MiB once percent-encoded,
  // hosts for IDNA of 4096 bytes. 120,000 CJK characters percent-encode to 1,080,000.
  const BIG = `"http://a.test/" + "\\u4e00".repeat(120000)`;

  it("refuses a URL over a limit of the host's as invalid, naming the limit", () => {
    const out = inRealm(`const big = ${BIG}; let e; try { new URL(big); } catch (x) { e = x; }
      return [e instanceof TypeError, e.code, e.message, e.input.length, URL.canParse(big), URL.parse(big)]`);
    expect(out).toEqual({
      ok: [
        true,
        "ERR_INVALID_URL",
        "Invalid URL: URL longer than cordon's limit of 1048576 characters (1 MiB), counted percent-encoded (one non-ASCII character can take 9)",
        120_014,
        false,
        null,
      ],
    });
    expect(
      inRealm(`try { new URL("http://" + "é".repeat(3000) + "/"); } catch (e) { return [e.name, e.code, e.message]; }`),
    ).toEqual({
      ok: [
        "TypeError",
        "ERR_INVALID_URL",
        "Invalid URL: URL host over cordon's limit for hosts that need IDNA (non-ASCII characters, percent-escapes or an xn-- label): 4096 bytes, 1024 per label",
      ],
    });
  });

  it("throws from a setter past a limit, the URL and its searchParams unchanged", () => {
    const out =
      inRealm(`const u = new URL("http://a.test/p?a=1#h"); const sp = u.searchParams; const big = ${BIG}; const log = [];
      const attempt = (f) => { try { f(); log.push("accepted"); } catch (e) { log.push([e.name, e.message.slice(0, 40)]); } };
      attempt(() => { u.pathname = big; });
      attempt(() => { u.hash = big; });
      attempt(() => { u.hostname = "é".repeat(600); });
      attempt(() => { u.href = big; });
      attempt(() => sp.append("b", big));
      attempt(() => sp.set("a", big));
      log.push(u.href, sp.toString(), sp.size, [...sp]);
      sp.append("c", "3"); sp.delete("a"); log.push(u.href);
      return log;`);
    expect(out).toEqual({
      ok: [
        ["RangeError", "Cannot set URL.pathname: URL longer than"],
        ["RangeError", "Cannot set URL.hash: URL longer than cor"],
        ["RangeError", "Cannot set URL.hostname: URL host over c"],
        ["TypeError", "Invalid URL: URL longer than cordon's li"],
        ["RangeError", "Cannot update URL.search from its search"],
        ["RangeError", "Cannot update URL.search from its search"],
        "http://a.test/p?a=1#h",
        "a=1",
        1,
        [["a", "1"]],
        "http://a.test/p?c=3#h",
      ],
    });
  });

  it("sends the host at most 1 MiB and one character of any text", () => {
    const lengths: number[] = [];
    const counting: WebApiDeps = {
      ...deps,
      parseUrl: (input, base) => {
        lengths.push(input.length, base?.length ?? 0);
        return deps.parseUrl(input, base);
      },
      setUrlPart: (href, part, value) => {
        lengths.push(value.length);
        return deps.setUrlPart(href, part, value);
      },
    };
    const ctx = vm.createContext({ __deps: counting });
    vm.runInContext(`(${installWebApis.toString()})(globalThis, __deps); delete globalThis.__deps;`, ctx);
    const out = inRealm(
      `const huge = "x".repeat(5e6); const u = new URL("http://a.test/");
      return [URL.canParse(huge, huge), (() => { try { u.search = huge; } catch (e) { return e.name; } })()]`,
      ctx,
    );
    expect(out).toEqual({ ok: [false, "RangeError"] });
    expect(lengths).toEqual([14, 0, 1_048_577, 1_048_577, 1_048_577]);
  });

  it("keeps internals private", () => {
    expect(
      inRealm(
        `const fake = Object.create(URL.prototype); try { return fake.href; } catch (e) { return e instanceof TypeError; }`,
      ),
    ).toEqual({ ok: true });
    expect(inRealm(`return Object.getOwnPropertyNames(new URL("http://a")).length`)).toEqual({ ok: 0 });
  });
});

describe("URLSearchParams", () => {
  const inputs = [
    "",
    "?",
    "??a=1",
    "a=b&c=d",
    "?a=1&a=2&b",
    "a+b=c+d",
    "a%2Bb=c%20d",
    "=",
    "=x",
    "&&&a=1&&",
    "a=b=c",
    "%",
    "%%41",
    "%4",
    "%zz=%g1",
    "%41%42%4",
    "a=%E2%82%AC",
    "%FF%FE=%C3",
    "%ED%A0%80=%F0%9F%98%80",
    "%F0%9F%98=%E2%82",
    "%C0%AF=%EF%BB%BFbom",
    "\uD800=\uDC00x",
    "é=ü&日本=語",
    "😀=🙂",
    "a=%2526&b=%26",
    "a\u0000b=%00",
  ];

  it.each(inputs)("parses %j like Node", (input) => {
    same(
      `const p = new URLSearchParams(${q(input)}); return [[...p], p.toString(), p.size, p.get("a"), p.getAll("a"), p.has("a")]`,
    );
  });

  it("serializes tricky names and values like Node", () => {
    same(`const p = new URLSearchParams(); for (const s of [" !\\"#$%&'()*+,-./:;<=>?@[\\\\]^_\`{|}~", "é€😀", "\\uD800", "a\\uDC00", "\\u0000\\u007f", "abcXYZ019*-._"]) p.append(s, s);
      return [p.toString(), [...new URLSearchParams(p.toString())]]`);
  });

  it("accepts records, pair iterables and other instances like Node", () => {
    same(`return [...new URLSearchParams({ a: 1, b: "x y", "\\uD800": null, [Symbol.iterator]: undefined })]`);
    same(`return [...new URLSearchParams([["a", 1], new Set(["b", "c"]), ["a", undefined]])]`);
    same(`const m = new Map([["k", "v"], ["k2", "v2"]]); return [...new URLSearchParams(m)]`);
    same(
      `const a = new URLSearchParams("x=1&y=2"); const b = new URLSearchParams(a); b.append("z", 3); return [a.toString(), b.toString()]`,
    );
    same(`return [...new URLSearchParams(123)]`);
    // WebIDL converts null through the USVString branch of the union (as browsers do); Node returns "".
    expect(inRealm(`return new URLSearchParams(null).toString()`)).toEqual({ ok: "null=" });
    same(`return new URLSearchParams([["a"]])`);
    same(`return new URLSearchParams([["a", "b", "c"]])`);
    same(`return new URLSearchParams([1])`);
    same(`return [...new URLSearchParams({ get a() { return "g"; } })]`);
  });

  it("mutates like Node", () => {
    same(`const p = new URLSearchParams("a=1&b=2&a=3&c=4&a=1");
      const log = [];
      log.push(p.has("a", "3"), p.has("a", "9"), p.has("z"));
      p.delete("a", "1"); log.push(p.toString());
      p.set("a", "x"); log.push(p.toString());
      p.set("new", "n"); log.push(p.toString());
      p.append("b", "5"); p.delete("b"); log.push(p.toString(), p.size);
      p.delete("nope"); log.push(p.get("nope"), p.getAll("nope"));
      return log;`);
  });

  it("sorts stably by UTF-16 code units like Node", () => {
    same(`const p = new URLSearchParams("z=1&a=2&\\uFFFD=3&😀=4&a=1&é=5&A=6&a=0&=7"); p.sort(); return [...p]`);
  });

  it("iterates live like Node", () => {
    same(`const p = new URLSearchParams("a=1&b=2&c=3"); const seen = [];
      p.forEach(function (v, k, self) { seen.push([k, v, self === p, this.t]); if (k === "a") p.append("d", "4"); }, { t: "T" });
      const it = p.keys(); seen.push(it.next().value); p.delete("a"); seen.push(it.next().value, [...it]);
      seen.push([...p.values()], [...p.entries()], p[Symbol.iterator] === p.entries, typeof it[Symbol.iterator]);
      return seen;`);
    same(`return new URLSearchParams("a=1").forEach(5)`);
  });

  it("requires arguments like Node", () => {
    for (const m of ["append('a')", "set('a')", "get()", "getAll()", "has()", "delete()"]) {
      same(`return new URLSearchParams().${m}`);
    }
  });
});

describe("TextEncoder", () => {
  const strings = [
    "",
    "abc",
    "é",
    "€",
    "😀",
    "\uD800",
    "\uDC00",
    "a\uD800b",
    "\uD83D\uDE00\uD83D",
    "\uDE00\uD83D",
    "\u0000\u007f\u0080\u07ff\u0800\uffff",
  ];

  it.each(strings)("encodes %j like Node", (s) => {
    same(`const e = new TextEncoder(); return [e.encoding, Array.from(e.encode(${q(s)}))]`);
  });

  it("encodes a long mixed string like Node", () => {
    same(`const s = "aé€😀\\uD800".repeat(20000); return Array.from(new TextEncoder().encode(s)).join(",")`);
    same(
      `return [Array.from(new TextEncoder().encode()), Array.from(new TextEncoder().encode(undefined)), Array.from(new TextEncoder().encode(12))]`,
    );
  });

  it.each(strings.concat(["a😀bc", "€€€"]))("encodeInto %j like Node for every destination size", (s) => {
    same(`const e = new TextEncoder(); const out = [];
      for (let n = 0; n <= 12; n++) { const d = new Uint8Array(n).fill(7); const r = e.encodeInto(${q(s)}, d); out.push([r.read, r.written, Array.from(d)]); }
      return out;`);
  });

  it("rejects non-Uint8Array destinations", () => {
    same(`return new TextEncoder().encodeInto("a", new Uint16Array(4))`);
    same(`return new TextEncoder().encodeInto("a", [])`);
  });
});

describe("TextDecoder", () => {
  const sequences: number[][] = [
    [],
    [0x41, 0x42],
    [0xef, 0xbb, 0xbf, 0x41],
    [0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf],
    [0xef, 0xbb],
    [0xc0, 0x80],
    [0xc1, 0xbf],
    [0xe0, 0x80, 0x80],
    [0xe0, 0x9f, 0xbf],
    [0xed, 0xa0, 0x80],
    [0xed, 0x9f, 0xbf],
    [0xf4, 0x90, 0x80, 0x80],
    [0xf5, 0x80, 0x80, 0x80],
    [0xf0, 0x8f, 0xbf, 0xbf],
    [0xf0, 0x9f, 0x98],
    [0xf0, 0x9f, 0x98, 0x80],
    [0xf0, 0x9f, 0x98, 0x41],
    [0xff, 0xfe, 0xfd],
    [0x80, 0x80, 0xbf],
    [0xe2, 0x82],
    [0xe2, 0x41, 0x82, 0xac],
    [0xc2],
    [0x41, 0xc2, 0xc2, 0xa9],
    [0xf8, 0x88, 0x80, 0x80, 0x80],
    [0x00, 0x7f, 0xc2, 0x80, 0xdf, 0xbf, 0xe0, 0xa0, 0x80, 0xef, 0xbf, 0xbf, 0xf0, 0x90, 0x80, 0x80, 0xf4, 0x8f, 0xbf, 0xbf],
  ];
  // A deterministic pseudo-random soup biased towards UTF-8 lead and continuation bytes.
  let seed = 12345;
  const soup = Array.from({ length: 4000 }, () => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    const r = seed >>> 16;
    return r % 3 === 0 ? r & 0x7f : 0x80 + (r % 0x78);
  });
  const all = sequences.concat([soup]);

  it.each(all.map((s) => [s.length > 40 ? `soup of ${s.length} bytes` : q(s), s]))("decodes %s like Node", (_name, bytes) => {
    const b = `new Uint8Array(${q(bytes)})`;
    same(`return [new TextDecoder().decode(${b}), new TextDecoder("utf-8", { ignoreBOM: true }).decode(${b})]`);
    same(`return new TextDecoder("utf-8", { fatal: true }).decode(${b})`);
    // Streaming one byte at a time must produce the same text as a single call.
    same(
      `const d = new TextDecoder(); let s = ""; for (const x of ${b}) s += d.decode(new Uint8Array([x]), { stream: true }); return s + d.decode()`,
    );
    same(`const d = new TextDecoder("utf8", { ignoreBOM: true }); let s = ""; const a = ${b};
      for (let i = 0; i < a.length; i += 3) s += d.decode(a.subarray(i, i + 3), { stream: true }); return [s + d.decode(), d.decode(a)]`);
  });

  it("reuses a decoder after a flushed call, looking for the BOM again", () => {
    same(`const d = new TextDecoder(); const bom = new Uint8Array([0xef, 0xbb, 0xbf, 0x61]);
      return [d.decode(bom), d.decode(bom), d.decode(new Uint8Array([0xe2, 0x82]), { stream: true }), d.decode(new Uint8Array([0xac]))]`);
  });

  it("recovers after a fatal error in the middle of a stream", () => {
    same(`const d = new TextDecoder("utf-8", { fatal: true }); const out = [];
      d.decode(new Uint8Array([0xe0]), { stream: true });
      try { d.decode(new Uint8Array([0x41])); } catch (e) { out.push(e.name); }
      out.push(d.decode(new Uint8Array([0xc2, 0x80])), d.decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x62])));
      return out;`);
  });

  it("accepts ArrayBuffer, DataView and any typed-array view", () => {
    same(`const buf = new TextEncoder().encode("xx€yy").buffer; return [
      new TextDecoder().decode(buf), new TextDecoder().decode(new DataView(buf, 2, 3)), new TextDecoder().decode(new Uint8Array(buf, 1, 4)),
      new TextDecoder().decode(new Uint16Array(new Uint8Array([0x61, 0x62, 0x63, 0x64]).buffer)), new TextDecoder().decode(), new TextDecoder().decode(undefined)]`);
    same(`return new TextDecoder().decode("abc")`);
    same(`return new TextDecoder().decode([0x61])`);
  });

  it("handles labels and options", () => {
    same(
      `return ["utf-8", "UTF8", " Unicode-1-1-UTF-8\\n", "unicode20utf8"].map((l) => { const d = new TextDecoder(l); return [d.encoding, d.fatal, d.ignoreBOM]; })`,
    );
    same(`const d = new TextDecoder(undefined, { fatal: 1, ignoreBOM: "yes" }); return [d.encoding, d.fatal, d.ignoreBOM]`);
    expect(inRealm(`return new TextDecoder("latin1")`)).toEqual({ error: "RangeError" });
    same(`return new TextDecoder("utf-16x")`);
  });
});

describe("atob / btoa", () => {
  const binaries = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "\u0000\u00ff\u00fe",
    Array.from({ length: 256 }, (_, i) => String.fromCharCode(i)).join(""),
  ];

  it.each(binaries)("btoa(%j) matches Node", (s) => {
    same(`return btoa(${q(s)})`);
  });

  it.each(["€", "a\uD800", "\u0100"])("btoa(%j) throws InvalidCharacterError like Node", (s) => {
    same(`return btoa(${q(s)})`);
    expect(
      inRealm(
        `try { btoa(${q(s)}); } catch (e) { return [e instanceof Error, e.code, e.stack.startsWith("InvalidCharacterError")]; }`,
      ),
    ).toEqual({
      ok: [true, 5, true],
    });
  });

  const encoded = [
    "",
    "YQ==",
    "YQ",
    "YQ=",
    "Y",
    "YWJj",
    " Y W\tJ\nj\f\r",
    "YQ==\n",
    "YQ= =",
    "YQ===",
    "Y===",
    "====",
    "=",
    "YQ=a",
    "YWI=",
    "YWI==",
    "YWJjZA",
    "YWJjZA=",
    "YWJjZA==",
    "!!!!",
    "YW-_",
    "ab\u00a0c",
    "ab\u2028c",
    "AAAA=",
    "//+/",
    "AP8=",
    "YR==",
    "YQ\u0000",
    "undefined",
  ];

  it.each(encoded)("atob(%j) matches Node", (s) => {
    same(`return atob(${q(s)})`);
  });

  it("round-trips large inputs", () => {
    same(`let s = ""; for (let i = 0; i < 300000; i++) s += String.fromCharCode((i * 7919) & 255);
      const b = btoa(s); return [b.length, b.slice(0, 64), b.slice(-64), atob(b) === s, atob(b.replace(/(.{76})/g, "$1\\n")) === s]`);
    same(`return [atob(), btoa()]`);
  });
});

describe("crypto and structuredClone", () => {
  it("fills integer typed arrays in place", () => {
    const out =
      inRealm(`const kinds = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, BigInt64Array, BigUint64Array];
      return kinds.map((K) => { const a = new K(64); const r = crypto.getRandomValues(a); return [r === a, a.some((x) => x != 0)]; })
        .concat([[crypto.getRandomValues(new Uint8Array(65536)).length, crypto.getRandomValues(new Uint8Array(0)).length]]);`);
    expect(out).toEqual({ ok: [...Array.from({ length: 9 }, () => [true, true]), [65536, 0]] });
    // A view into the middle of a buffer only touches its own bytes.
    expect(
      inRealm(`const b = new Uint8Array(32); crypto.getRandomValues(new Uint8Array(b.buffer, 8, 16));
      return [b.slice(0, 8).every((x) => x === 0), b.slice(24).every((x) => x === 0), b.slice(8, 24).some((x) => x !== 0)]`),
    ).toEqual({
      ok: [true, true, true],
    });
  });

  it("rejects non-integer arrays and oversized requests with DOM error names", () => {
    for (const expr of [
      "new Float32Array(4)",
      "new Float64Array(4)",
      "new DataView(new ArrayBuffer(4))",
      "[1, 2]",
      "new ArrayBuffer(4)",
    ]) {
      expect(inRealm(`return crypto.getRandomValues(${expr})`)).toEqual({ error: "TypeMismatchError" });
    }
    expect(inRealm(`return crypto.getRandomValues(new Uint8Array(65537))`)).toEqual({ error: "QuotaExceededError" });
    expect(inRealm(`return crypto.getRandomValues(new Uint32Array(16385))`)).toEqual({ error: "QuotaExceededError" });
  });

  it("makes v4 UUIDs", () => {
    const out = inRealm(
      `const ids = Array.from({ length: 50 }, () => crypto.randomUUID()); return [ids.every((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id)), new Set(ids).size]`,
    );
    expect(out).toEqual({ ok: [true, 50] });
  });

  it("clones through deps.clone", () => {
    expect(
      inRealm(
        `const v = { a: [1, { b: "c" }], d: new Date(0).toISOString() }; const c = structuredClone(v); return [c !== v, c]`,
      ),
    ).toEqual({
      ok: [true, { a: [1, { b: "c" }], d: "1970-01-01T00:00:00.000Z" }],
    });
    expect(inRealm(`return structuredClone(() => 1)`)).toEqual({ error: "DataCloneError" });
    expect(inRealm(`return structuredClone()`)).toEqual({ error: "TypeError" });
  });
});

describe("robustness against guest tampering", () => {
  it("keeps working after the guest patches builtin prototypes", () => {
    const ctx = makeRealm();
    vm.runInContext(
      `String.prototype.charCodeAt = () => 0; String.prototype.slice = () => "x"; String.prototype.indexOf = () => -1;
       Array.prototype.push = () => { throw new Error("push"); }; Array.prototype.join = () => "joined";
       Array.prototype[Symbol.iterator] = function* () { throw new Error("iter"); };
       String.fromCharCode = () => "?"; JSON.parse = () => ({}); Reflect.apply = () => 0;
       Object.defineProperty(Uint8Array.prototype, "length", { value: 0 });
       Object.defineProperty(Object.prototype, "get", { value: () => 1, configurable: true });`,
      ctx,
    );
    const out = inRealm(
      `const p = new URLSearchParams("a=%C3%A9+b&c=1"); p.append("d", "€"); p.sort(); const u = new URL("https://x.example/?q=1"); u.searchParams.set("q", "2 3");
       return [p.get("a"), p.toString(), u.href, new TextDecoder().decode(new TextEncoder().encode("é😀")), atob(btoa("hi")), p.size]`,
      ctx,
    );
    expect(out).toEqual({ ok: ["é b", "a=%C3%A9+b&c=1&d=%E2%82%AC", "https://x.example/?q=2+3", "é😀", "hi", 3] });
  });
});
