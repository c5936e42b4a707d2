import vm from "node:vm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { hostFetchExtension, needsBodies } from "../../src/core/fetch-wire.js";
import { installFetchTypes } from "../../src/engines/guest/fetch-types.js";
import { installWebApis, type WebApiDeps } from "../../src/engines/guest/web-apis.js";
import { createHostServices, hostServices } from "../../src/engines/host-services.js";
import { createSandbox } from "../../src/index.js";
import { value } from "../helpers/results.js";

/** The codec's refusal, never reached by these values (no crossing bound is near). */
const refuse = (reason: string): never => {
  throw new Error(reason);
};
/**
 * A Request crossing into a guest carries the host's parse of its URL (`p`, core/fetch-wire.ts),
 * which the v8 and QuickJS guests keep: the Request's own parse, and the handler's
 * `new URL(request.url)`, then cost no crossing (on v8 ~30 µs of a call, ~60 µs of its charge).
 */
describe("a Request's URL parts on the wire", () => {
  it("are the host's parse of its URL, for URLs the guests' parse cache keeps", () => {
    const encoded = (url: string) => {
      const request = new Request(url);
      expect(needsBodies([request])).toBe(false); // a GET's body is known: none
      return hostFetchExtension.encode(request, refuse) as Record<string, unknown>;
    };
    const url = "http://a.test/x?y=1#z";
    const wire = encoded(url);
    expect(wire.u).toBe(url);
    expect(wire.p).toBe(hostServices.parseUrl(url));
    expect(encoded(`http://a.test/${"x".repeat(600)}`).p).toBeUndefined();
  });
});

describe("a guest given a Request's URL parts", () => {
  /** A realm as the engines build it, whose host parses are counted. */
  function realm() {
    const services = createHostServices();
    const parses: string[] = [];
    const deps: WebApiDeps = {
      ...services,
      parseUrl: (input, base) => {
        parses.push(input);
        return services.parseUrl(input, base);
      },
      clone: (v) => structuredClone(v),
    };
    const ctx = vm.createContext({ __deps: deps });
    vm.runInContext(
      `const hooks = (${installWebApis.toString()})(globalThis, __deps);
       delete globalThis.__deps;
       globalThis.__wire = (${installFetchTypes.toString()})(globalThis, hooks);`,
      ctx,
    );
    /** The URL of a Request decoded from a wire with `p`, and its search param `y` read through `new URL`. */
    const decode = (u: string, p: unknown): unknown =>
      vm.runInContext(
        `(() => { const r = __wire.fromWire(${JSON.stringify({ $: "Q", m: "GET", u, h: [], b: null, p })});
          return [r.url, new URL(r.url).searchParams.get("y")]; })()`,
        ctx,
      );
    return { parses, decode, services };
  }

  // why: each Request with a URL the guest had not parsed cost a crossing to parse it
  // (63 µs p50, charged 71 µs, against 31 µs charged 13 for a repeated URL, on v8).
  it("keeps the host's parse: neither the Request nor `new URL(request.url)` crosses for it", () => {
    const { parses, decode, services } = realm();
    for (let i = 0; i < 5; i++) {
      const u = `http://a.test/${i}?y=${i}`;
      expect(decode(u, services.parseUrl(u))).toEqual([u, String(i)]);
    }
    expect(parses).toEqual([]);
  });

  it("ignores parts that are not a parse of that very URL, and parses it itself", () => {
    const { parses, decode, services } = realm();
    // Another URL's parse, a refusal, a failure, a header without an href, and no string at all.
    const given = [services.parseUrl("http://evil.test/p?y=2"), "!too long", "", "[1,2]", 7, null];
    for (const [k, p] of given.entries()) {
      const u = `http://a.test/p${k}?y=1`; // each a URL this realm has not parsed (nor kept) yet
      parses.length = 0;
      expect(decode(u, p)).toEqual([u, "1"]);
      expect(parses).toContain(u);
    }
  });
});

describe("v8: a call given Requests with new URLs", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("parses none of them in a crossing", async () => {
    // The isolate's parse crossing calls parseUrl(input, base); the wire's, parseUrl(url).
    const parse = vi.spyOn(hostServices, "parseUrl");
    await using sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    await using prefix = await sandbox.prepare({
      code: `export default { fetch(request) { return new URL(request.url).searchParams.get("n") } }`,
    });
    for (let i = 0; i < 20; i++) {
      const result = await prefix.call({ export: "default.fetch", args: [new Request(`http://a.test/${i}?n=${i}`)] });
      expect(value(result)).toBe(String(i));
    }
    const crossings = parse.mock.calls.filter((args) => args.length === 2);
    expect(crossings).toEqual([]);
    expect(parse.mock.calls.length).toBeGreaterThanOrEqual(20);
  });
});
