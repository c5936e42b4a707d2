import { describe, expect, it } from "vitest";
import { importAllowList, narrowAllowList, type NetRule } from "../../src/egress/index.js";

const ceiling = ["api.example.com", "*.cdn.io", "db.example.com:5432", "files.example.com:8443"];

describe("narrowAllowList", () => {
  it("null tenant: the tenant chose nothing, the ceiling stands", () => {
    expect(narrowAllowList(ceiling, null)).toEqual(ceiling);
  });

  it("[]: nothing", () => {
    expect(narrowAllowList(ceiling, [])).toEqual([]);
  });

  it('["*"]: the whole ceiling, never wider', () => {
    expect(narrowAllowList(ceiling, ["*"])).toEqual(ceiling);
    expect(narrowAllowList(ceiling, ["*", "api.example.com"])).toEqual(ceiling);
    expect(narrowAllowList(["*"], ["*"])).toEqual(["*"]);
  });

  it("keeps entries the ceiling covers and drops the others", () => {
    const tenant: NetRule[] = [
      "api.example.com",
      "API.Example.com.",
      "evil.test",
      "example.com",
      "db.example.com",
      "db.example.com:5432",
      "api.example.com:8443",
      "files.example.com:8443",
      "files.example.com",
    ];
    expect(narrowAllowList(ceiling, tenant)).toEqual([
      "api.example.com",
      "API.Example.com.",
      "db.example.com:5432",
      "files.example.com:8443",
    ]);
  });

  it("keeps a subdomain or a narrower wildcard of a permitted wildcard, not its apex or a wider one", () => {
    const tenant: NetRule[] = ["img.cdn.io", "a.b.cdn.io", "*.eu.cdn.io", "*.cdn.io", "cdn.io", "*.io", "*", "evilcdn.io"];
    expect(narrowAllowList(["*.cdn.io"], tenant)).toEqual(["img.cdn.io", "a.b.cdn.io", "*.eu.cdn.io", "*.cdn.io"]);
  });

  it("keeps routes of a covered entry (they only narrow it)", () => {
    const rule = { host: "api.example.com", routes: [{ path: "/users/**", methods: ["GET"] }] };
    expect(narrowAllowList(ceiling, [rule, { host: "evil.test", routes: [{ path: "/" }] }])).toEqual([rule]);
  });

  it("needs the same port: a port-less ceiling entry does not cover host:443 (http on 443)", () => {
    expect(narrowAllowList(["api.test"], ["api.test:443", "api.test:80"])).toEqual([]);
    expect(narrowAllowList(["*:8080"], ["x.test:8080", "x.test"])).toEqual(["x.test:8080"]);
  });

  it("a * ceiling covers any host on the default ports, and a tenant * wildcard only under it", () => {
    expect(narrowAllowList(["*"], ["a.test", "*.b.test", { host: "*", routes: [{ path: "/x" }] }])).toEqual([
      "a.test",
      "*.b.test",
      { host: "*", routes: [{ path: "/x" }] },
    ]);
    expect(narrowAllowList(["a.test"], [{ host: "*", routes: [{ path: "/x" }] }])).toEqual([]);
  });

  it("null ceiling means no ceiling, and only null does", () => {
    expect(narrowAllowList(null, ["anything.test"])).toEqual(["anything.test"]);
    expect(narrowAllowList(null, null)).toEqual([]);
    expect(() => narrowAllowList(undefined as unknown as null, ["a.test"])).toThrow(/pass null/);
    expect(() => narrowAllowList(ceiling, undefined as unknown as null)).toThrow(/pass null/);
  });

  it("validates both lists, naming the bad entry", () => {
    expect(() => narrowAllowList(["ok.test", "bad host"], null)).toThrow(/ceiling\[1\]/);
    expect(() => narrowAllowList(ceiling, ["ok.test", "x.test:0"])).toThrow(/tenant\[1\]/);
    expect(() => narrowAllowList([{ host: "x" }] as unknown as string[], null)).toThrow(/string rules/);
  });
});

describe("importAllowList (the deno engine's --allow-import hosts)", () => {
  it("refuses special-purpose address literals in any form and localhost names, ceiling or not", () => {
    for (const host of ["127.0.0.1", "127.1", "2130706433", "0x7f.1", "10.0.0.5:8080", "169.254.169.254", "0.0.0.0"]) {
      expect(() => importAllowList(null, [host]), host).toThrow(TypeError);
      expect(() => importAllowList(["*"], [host]), host).toThrow(/capabilities\.import\[0\].* not a public host/);
    }
    for (const host of ["localhost", "LOCALHOST:8080", "api.localhost", "localhost."]) {
      expect(() => importAllowList(null, [host]), host).toThrow(/is loopback/);
    }
    expect(() => importAllowList(null, ["esm.sh:0"])).toThrow(/port/);
  });

  it("without a ceiling, keeps the entries as written (normalized); a public address literal is a host like any", () => {
    expect(importAllowList(null, ["ESM.sh", "example.com:8443", "93.184.215.14"])).toEqual([
      "esm.sh",
      "example.com:8443",
      "93.184.215.14",
    ]);
  });

  it("with a ceiling, narrows like net rules; a kept port-less entry is written with the default ports only", () => {
    const allow = ["esm.sh", "*.example.com", "files.test:8443"];
    expect(
      importAllowList(allow, ["esm.sh", "cdn.example.com", "example.com", "evil.test", "esm.sh:8080", "files.test:8443"]),
    ).toEqual(["esm.sh:80", "esm.sh:443", "cdn.example.com:80", "cdn.example.com:443", "files.test:8443"]);
    expect(importAllowList(["api.example.com"], ["esm.sh"])).toEqual([]);
  });
});
