import { describe, expect, it } from "vitest";
import { matchRule, type NetRule, validateRules } from "../../src/egress/index.js";
import { routeOverrideRefusal } from "../../src/egress/rules.js";

const allowed = (rules: NetRule[], url: string, method = "GET") => matchRule(rules, new URL(url), method).ok;
const reason = (rules: NetRule[], url: string, method = "GET") => {
  const result = matchRule(rules, new URL(url), method);
  return result.ok ? null : result.reason;
};

describe("validateRules", () => {
  it("accepts every documented form", () => {
    expect(() =>
      validateRules(
        [
          "api.example.com",
          "*.cdn.io",
          "api.example.com:8443",
          "*.cdn.io:8443",
          "*",
          "*:8080",
          "127.0.0.1:3000",
          "[::1]:3000",
          "bücher.test",
          "API.Example.COM.",
          { host: "api.example.com" },
          { host: "api.example.com", port: 8443, routes: [{ path: "/users/**", methods: ["GET", "post"] }] },
          { host: "*.cdn.io", routes: [{ path: "/items/:id" }, { path: "/exact" }, { path: "/files/*/meta" }, { path: "/" }] },
        ],
        "net",
      ),
    ).not.toThrow();
  });

  it.each([
    ["not an array", "api.example.com", /^net must be an array/],
    ["a space", ["a b"], /^net\[0\]/],
    ["a URL", ["http://x.test"], /net\[0\]/],
    ["a path", ["x.test/path"], /net\[0\].*not a host/],
    ["userinfo", ["a@x.test"], /net\[0\]/],
    ["a percent", ["x%2e.test"], /net\[0\]/],
    ["an empty host", [""], /net\[0\]/],
    ["a bare wildcard dot", ["*."], /net\[0\]/],
    ["a double wildcard", ["*.*.x.test"], /net\[0\]/],
    ["a partial wildcard", ["a*.x.test"], /net\[0\]/],
    ["a wildcard over an address", ["*.0.0.1"], /net\[0\].*address/],
    ["port 0", ["x.test:0"], /net\[0\].*port/],
    ["port 70000", ["x.test:70000"], /net\[0\].*port/],
    ["a named port", ["x.test:http"], /net\[0\].*port/],
    ["an unbracketed IPv6 host", ["::1"], /net\[0\].*bracket/],
    ["an unclosed bracket", ["[::1"], /net\[0\]/],
    ["a port as a string", [{ host: "x.test", port: "80" }], /net\[0\].*port must be a number/],
    ["a port inside host", [{ host: "x.test:80" }], /net\[0\].*"port"/],
    ["an unknown key", [{ host: "x.test", method: "GET" }], /net\[0\].*unknown key "method"/],
    ["empty routes", [{ host: "x.test", routes: [] }], /net\[0\].*routes/],
    ["a relative path", [{ host: "x.test", routes: [{ path: "users" }] }], /routes\[0\]\.path/],
    ["a dot segment", [{ host: "x.test", routes: [{ path: "/a/../b" }] }], /not a normalized path/],
    ["a space in a path", [{ host: "x.test", routes: [{ path: "/a b" }] }], /not a normalized path/],
    ["** before the end", [{ host: "x.test", routes: [{ path: "/**/x" }] }], /last segment/],
    ["a partial star", [{ host: "x.test", routes: [{ path: "/a*" }] }], /whole segments/],
    ["a bad param", [{ host: "x.test", routes: [{ path: "/:1" }] }], /:name/],
    ["a query", [{ host: "x.test", routes: [{ path: "/a?b" }] }], /not a normalized path/],
    ["no methods", [{ host: "x.test", routes: [{ path: "/", methods: [] }] }], /methods/],
    ["a bad method", [{ host: "x.test", routes: [{ path: "/", methods: ["G T"] }] }], /methods/],
    ["an unknown route key", [{ host: "x.test", routes: [{ path: "/", method: ["GET"] }] }], /unknown key/],
    ["null", [null], /net\[0\]/],
    ["a number", ["ok.test", 42], /net\[1\]/],
  ])("refuses %s, naming the entry", (_, rules, message) => {
    expect(() => validateRules(rules, "net")).toThrow(TypeError);
    expect(() => validateRules(rules, "net")).toThrow(message);
  });
});

describe("matchRule: hosts", () => {
  it("matches an exact host after normalization (case, trailing dot, IDNA)", () => {
    expect(allowed(["api.example.com"], "https://API.Example.com./x")).toBe(true);
    expect(allowed(["API.EXAMPLE.COM."], "https://api.example.com/")).toBe(true);
    expect(allowed(["bücher.test"], "https://xn--bcher-kva.test/")).toBe(true);
    expect(allowed(["xn--bcher-kva.test"], "https://BÜCHER.test/")).toBe(true);
    expect(allowed(["api.example.com"], "https://api.example.com../")).toBe(false);
    expect(allowed(["api.example.com"], "https://api.example.com.evil.test/")).toBe(false);
    expect(allowed(["api.example.com"], "https://evil-api.example.com/")).toBe(false);
  });

  it("matches subdomains of a wildcard, not its apex or lookalikes", () => {
    const rules = ["*.cdn.io"];
    expect(allowed(rules, "https://a.cdn.io/")).toBe(true);
    expect(allowed(rules, "https://a.b.cdn.io/")).toBe(true);
    expect(allowed(rules, "https://A.CDN.IO./")).toBe(true);
    expect(allowed(rules, "https://cdn.io/")).toBe(false);
    expect(allowed(rules, "https://evilcdn.io/")).toBe(false);
    expect(allowed(rules, "https://cdn.io.evil.test/")).toBe(false);
  });

  it("refuses a wildcard's subdomain with an empty label (WHATWG URL keeps them; a custom resolve may not refuse them)", () => {
    const rules = ["*.cdn.io"];
    for (const host of [".cdn.io", "..cdn.io", "a..cdn.io", ".a.cdn.io", "a...cdn.io"]) {
      expect(new URL(`https://${host}/`).hostname).toBe(host);
      expect(allowed(rules, `https://${host}/`), host).toBe(false);
    }
    expect(reason(rules, "https://a..cdn.io/")).toBe('host "a..cdn.io" is not in the allow list');
    expect(allowed(rules, "https://a.b.cdn.io./")).toBe(true);
  });

  it("compares address literals in their normalized form", () => {
    expect(allowed(["127.0.0.1:3000"], "http://2130706433:3000/")).toBe(true);
    expect(allowed(["[::1]:3000"], "http://[0:0::1]:3000/")).toBe(true);
    expect(allowed(["*.0.1.test"], "http://127.0.0.1/")).toBe(false);
  });

  it("lets * match any host, on the default port unless it names one", () => {
    expect(allowed(["*"], "https://anything.test/")).toBe(true);
    expect(allowed(["*"], "http://10.0.0.1/")).toBe(true);
    expect(allowed(["*"], "https://anything.test:8443/")).toBe(false);
    expect(allowed(["*:8443"], "https://anything.test:8443/")).toBe(true);
  });
});

describe("matchRule: ports", () => {
  it("matches a port-less rule on the scheme's default port only", () => {
    expect(allowed(["api.test"], "http://api.test/")).toBe(true);
    expect(allowed(["api.test"], "https://api.test/")).toBe(true);
    expect(allowed(["api.test"], "http://api.test:80/")).toBe(true);
    expect(allowed(["api.test"], "http://api.test:443/")).toBe(false);
    expect(allowed(["api.test"], "https://api.test:80/")).toBe(false);
    expect(allowed(["api.test"], "https://api.test:8443/")).toBe(false);
  });

  it("matches an explicit port on any scheme", () => {
    expect(allowed(["api.test:8443"], "https://api.test:8443/")).toBe(true);
    expect(allowed(["api.test:8443"], "http://api.test:8443/")).toBe(true);
    expect(allowed(["api.test:443"], "https://api.test/")).toBe(true);
    expect(allowed(["api.test:8443"], "https://api.test/")).toBe(false);
    expect(allowed([{ host: "api.test", port: 8443 }], "https://api.test:8443/")).toBe(true);
  });

  it("says which port was refused and what the rule allows", () => {
    expect(reason(["api.test"], "http://api.test:8080/")).toMatch(
      /port 8080 of host "api.test" is not allowed.*default port of http/,
    );
    expect(reason(["api.test:9000"], "http://api.test:8080/")).toMatch(/only port 9000/);
    expect(reason(["api.test"], "http://other.test/")).toBe('host "other.test" is not in the allow list');
  });
});

describe("matchRule: routes", () => {
  const rules: NetRule[] = [
    {
      host: "api.test",
      routes: [
        { path: "/users/**", methods: ["GET"] },
        { path: "/items/:id", methods: ["GET", "DELETE"] },
        { path: "/files/*/meta" },
        { path: "/exact" },
      ],
    },
  ];

  it.each([
    ["/users", true],
    ["/users/", true],
    ["/users/1", true],
    ["/users/1/posts/2", true],
    ["/usersX", false],
    ["/admin", false],
    ["/users/../admin", false],
    ["/users/%2e%2e/admin", false],
    ["/items/1", true],
    ["/items/a%2Fb", true],
    ["/items/", false],
    ["/items", false],
    ["/items/1/2", false],
    ["/files/a/meta", true],
    ["/files//meta", true],
    ["/files/a/b/meta", false],
    ["/exact", true],
    ["/exact?query=1", true],
    ["/exact/", false],
    ["/Exact", false],
    ["/exact%2F", false],
  ])("%s → %s", (path, expected) => {
    expect(allowed(rules, `https://api.test${path}`)).toBe(expected);
  });

  // Servers decode before they route (nginx resolves `..%2f`, Tomcat reads `..;` as `..`): a
  // segment that is a dot segment once decoded never matches a route.
  it.each([
    "/users/..%2fadmin",
    "/users/..%2Fadmin",
    "/users/..;/admin",
    "/users/..;x=1/admin",
    "/users/.;/../admin",
    "/users/..%5cadmin",
    "/users/..%5Cadmin",
    "/users/%2e%2e%2fadmin",
    "/users/.%2e%2fadmin",
    "/users/a%2f..%2f..%2fadmin",
    "/users/%252e%252e%252fadmin",
    "/users/..%252fadmin",
    "/users/..%3b/admin",
    "/users/x%00",
    "/items/..%2f..%2fadmin",
    "/items/%2e%2e%2fadmin",
    "/items/..;",
    // Escapes no two servers read alike: nested past three decodings, overlong UTF-8 (a lax
    // decoder reads C0 AE as "."), and IIS's %u form.
    "/users/%2525252e%2525252e%2525252fadmin",
    "/users/%25252525252e",
    "/users/%c0%ae%c0%ae%c0%afadmin",
    "/users/%C0%AE%C0%AE",
    "/users/%e0%80%ae%e0%80%ae",
    "/users/%f0%80%80%ae",
    "/users/%c1%9c",
    "/users/%u002e%u002e%u2215admin",
    "/users/%25c0%25ae%25c0%25ae",
    // Fullwidth and other dots NFKC reads as ".", and a fullwidth solidus as "/".
    "/users/%EF%BC%8E%EF%BC%8E",
    "/users/%EF%BC%8E%EF%BC%8E%EF%BC%8Fadmin",
    "/users/%E2%80%A4%E2%80%A4",
    "/users/%EF%B9%92.",
    // Trailing whitespace Windows and IIS trim; UTF-8 lead bytes no decoder should accept (the
    // 5- and 6-byte overlong forms); a fullwidth escape NFKC makes ASCII (％２ｅ → %2e).
    "/users/..%20",
    "/users/..%09",
    "/users/.%20%20",
    "/users/%f8%80%80%80%ae",
    "/users/%fc%80%80%80%80%ae",
    "/users/%EF%BC%85%EF%BC%92%EF%BD%85%EF%BC%85%EF%BC%92%EF%BD%85",
  ])("refuses %s: a dot segment once decoded", (path) => {
    expect(allowed(rules, `https://api.test${path}`)).toBe(false);
    expect(reason(rules, `https://api.test${path}`)).toMatch(
      /holds a dot segment once decoded, or escapes servers read differently/,
    );
  });

  it("keeps allowing escapes that are no dot segment, and leaves rules without routes alone", () => {
    for (const path of [
      "/users/%40scope%2fname",
      "/items/a%3Bb",
      "/users/..x",
      "/users/x..",
      "/users/...",
      "/items/%E2%82%AC",
      "/items/%C3%A9t%C3%A9",
      "/items/%F0%9F%98%80",
      "/items/%E0%A0%80",
      "/items/100%2525",
      "/items/%u",
      "/items/%EF%BC%8Ex",
      "/items/%E3%80%82%E3%80%82",
      "/items/..%20x",
      "/items/a%20",
      "/items/%EF%BC%85%EF%BC%92%EF%BD%86",
    ])
      expect(allowed(rules, `https://api.test${path}`)).toBe(true);
    expect(allowed(["api.test"], "https://api.test/users/..%2fadmin")).toBe(true);
  });

  it("does not decode %2F into a separator", () => {
    const literal: NetRule[] = [{ host: "api.test", routes: [{ path: "/a/b" }] }];
    expect(allowed(literal, "https://api.test/a/b")).toBe(true);
    expect(allowed(literal, "https://api.test/a%2Fb")).toBe(false);
  });

  it("checks methods after fetch's normalization", () => {
    expect(allowed(rules, "https://api.test/users/1", "get")).toBe(true);
    expect(allowed(rules, "https://api.test/users/1", "POST")).toBe(false);
    expect(allowed(rules, "https://api.test/items/1", "delete")).toBe(true);
    expect(allowed(rules, "https://api.test/exact", "PATCH")).toBe(true);
    expect(reason(rules, "https://api.test/users/1", "POST")).toMatch(/method POST is not allowed for "\/users\/1"/);
    expect(reason(rules, "https://api.test/admin")).toMatch(/path "\/admin" is not allowed on host "api.test"/);
  });

  it("falls through to another rule for the same host", () => {
    const both: NetRule[] = [{ host: "api.test", routes: [{ path: "/a" }] }, "api.test"];
    expect(allowed(both, "https://api.test/b")).toBe(true);
  });

  it("answers with a rule without routes when one allows the request too, whatever the order", () => {
    const routed: NetRule = { host: "api.test", routes: [{ path: "/a", methods: ["GET"] }] };
    for (const list of [
      [routed, "api.test"],
      ["api.test", routed],
    ] as NetRule[][]) {
      const match = matchRule(list, new URL("https://api.test/a"), "GET");
      expect(match.ok && match.rule.routes).toBe(null);
    }
    const only = matchRule([routed, "other.test"], new URL("https://api.test/a"), "GET");
    expect(only.ok && only.rule.source).toBe(routed);
  });
});

describe("routeOverrideRefusal", () => {
  const routed: NetRule = { host: "api.test", routes: [{ path: "/public/**", methods: ["GET"] }] };
  const ruleFor = (rules: NetRule[], url: string) => {
    const match = matchRule(rules, new URL(url), "GET");
    if (!match.ok) throw new Error(match.reason);
    return match.rule;
  };

  it.each(["x-http-method-override", "x-http-method", "x-method-override", "x-original-url", "x-rewrite-url"])(
    "refuses %s under a rule with routes, and names both",
    (name) => {
      const refusal = routeOverrideRefusal(ruleFor([routed], "https://api.test/public/x"), [
        ["accept", "*/*"],
        [name, "DELETE"],
      ]);
      expect(refusal).toBe(
        `header "${name}" can make a server run another method or path than the request's, and rule "api.test" allows only its routes`,
      );
    },
  );

  it("takes them under a rule without routes, and takes other headers under any", () => {
    expect(
      routeOverrideRefusal(ruleFor(["api.test"], "https://api.test/x"), [["x-http-method-override", "DELETE"]]),
    ).toBeUndefined();
    expect(
      routeOverrideRefusal(ruleFor([routed], "https://api.test/public/x"), [
        ["x-forwarded-for", "1.2.3.4"],
        ["x-request-id", "7"],
      ]),
    ).toBeUndefined();
  });
});
