import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSafeFetch, createSystemResolve, EgressError } from "../../src/egress/index.js";
import { resolveHost } from "../../src/egress/resolve.js";
import { until } from "../helpers/processes.js";
import { dnsServer } from "./dns-server.js";
import { echoOf, type Listener, listen, refusal, tableResolver } from "./helpers.js";

let dns: Awaited<ReturnType<typeof dnsServer>>;
let local: Listener;

beforeAll(async () => {
  local = await listen("127.0.0.1");
  dns = await dnsServer({
    "both.test": { A: ["93.184.215.14", "93.184.215.15"], AAAA: ["2606:2800:21f:cb07:6820:80da:af6b:8b2c"] },
    "v4.test": { A: ["93.184.215.14"] },
    "v6.test": { AAAA: ["2606:2800:21f:cb07::1"] },
    "servfail.test": { rcode: 2 },
    "half.test": { A: ["93.184.215.14"], rcode: 2, rcodeFor: "AAAA" },
    "empty.test": {},
    "silent.test": { silent: true },
    "aborted.test": { silent: true },
    "local.test": { A: ["127.0.0.1"] },
  });
});
afterAll(async () => {
  dns.close();
  await local.close();
});

describe("the system resolver (c-ares against a local DNS server)", () => {
  const resolve = () => createSystemResolve({ servers: [dns.server], timeoutMs: 300 });

  it("returns every A and AAAA record", async () => {
    expect((await resolve()("both.test")).sort()).toEqual([
      "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
      "93.184.215.14",
      "93.184.215.15",
    ]);
    expect(await resolve()("v4.test")).toEqual(["93.184.215.14"]);
    expect(await resolve()("v6.test")).toEqual(["2606:2800:21f:cb07::1"]);
  });

  it("answers nothing for a name with no records, which resolveHost refuses", async () => {
    expect(await resolve()("empty.test")).toEqual([]);
    expect(await resolve()("nxdomain.test")).toEqual([]);
    await expect(resolveHost("empty.test", resolve(), 1000)).rejects.toMatchObject({ check: "dns", message: /no A or AAAA/ });
  });

  it("fails closed on a server failure, even of one family", async () => {
    await expect(resolve()("servfail.test")).rejects.toMatchObject({ code: "ESERVFAIL" });
    await expect(resolve()("half.test")).rejects.toMatchObject({ code: "ESERVFAIL" });
  });

  it("fails closed, quickly, when the server never answers", async () => {
    const started = performance.now();
    await expect(resolve()("silent.test")).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it("stops asking when its signal aborts, long before its own timeout", async () => {
    const slow = createSystemResolve({ servers: [dns.server], timeoutMs: 4000 });
    const started = performance.now();
    await expect(slow("silent.test", AbortSignal.timeout(50))).rejects.toMatchObject({ code: "ECANCELLED" });
    expect(performance.now() - started).toBeLessThan(2000);
    await expect(slow("silent.test", AbortSignal.abort())).rejects.toMatchObject({ name: "AbortError" });
  });

  it("ends an aborted fetch's lookup at once, the abort's reason its error", async () => {
    const safeFetch = createSafeFetch({ rules: ["aborted.test"], resolve: createSystemResolve({ servers: [dns.server] }) });
    const reason = new Error("the run ended");
    const controller = new AbortController();
    setTimeout(() => controller.abort(reason), 50);
    const { error, ms } = await failure(safeFetch("http://aborted.test/", { signal: controller.signal }));
    expect(error).toBe(reason);
    // 5 s (the DNS timeout) when the lookup did not see the exchange's signal.
    expect(ms).toBeLessThan(2000);
    // The server (on this thread) may read the two queries only now: the next test counts its own.
    await until(() => dns.queries.filter((query) => query.endsWith(" aborted.test")).length === 2);
  });

  it("serves safeFetch end to end, one query per family", async () => {
    dns.queries.length = 0;
    const safeFetch = createSafeFetch({
      rules: [`local.test:${local.port}`],
      internalOrigins: [`http://local.test:${local.port}`],
      resolve: resolve(),
    });
    const seen = await echoOf(await safeFetch(`http://local.test:${local.port}/echo`));
    expect(seen.headers.host).toBe(`local.test:${local.port}`);
    expect(dns.queries.sort()).toEqual(["A local.test", "AAAA local.test"]);
    const denied = createSafeFetch({ rules: [`local.test:${local.port}`], resolve: resolve() });
    await expect(denied(`http://local.test:${local.port}/echo`)).rejects.toMatchObject({ check: "address" });
  });
});

describe("resolveHost", () => {
  it("classifies an address literal without resolving it", async () => {
    const { resolve, calls } = tableResolver({});
    expect(await resolveHost("127.0.0.1", resolve, 100)).toEqual([{ address: "127.0.0.1", family: 4, verdict: "loopback" }]);
    expect(await resolveHost("[::ffff:7f00:1]", resolve, 100)).toEqual([
      { address: "::ffff:7f00:1", family: 6, verdict: "ipv4-mapped:loopback" },
    ]);
    expect(await resolveHost("93.184.215.14", resolve, 100)).toMatchObject([{ verdict: "public" }]);
    expect(calls).toEqual([]);
  });

  it("treats localhost names as loopback without asking DNS (RFC 6761)", async () => {
    const { resolve, calls } = tableResolver({ localhost: ["93.184.215.14"] });
    expect(await resolveHost("localhost", resolve, 100)).toMatchObject([{ verdict: "loopback" }, { verdict: "loopback" }]);
    expect(await resolveHost("a.b.localhost.", resolve, 100)).toMatchObject([{ address: "127.0.0.1" }, { address: "::1" }]);
    expect(calls).toEqual([]);
  });

  it("classifies every record, canonical and without duplicates, and asks without the trailing dot", async () => {
    const { resolve, calls } = tableResolver({ "multi.test": ["93.184.215.14", "::FFFF:10.0.0.1", "93.184.215.14", "0x7f.1"] });
    expect(await resolveHost("multi.test.", resolve, 100)).toEqual([
      { address: "93.184.215.14", family: 4, verdict: "public" },
      { address: "::ffff:a00:1", family: 6, verdict: "ipv4-mapped:private" },
      { address: "127.0.0.1", family: 4, verdict: "loopback" },
    ]);
    expect(calls).toEqual(["multi.test"]);
  });

  it("fails closed: errors, empty answers, non-addresses and timeouts are refusals", async () => {
    const failing = async () => {
      throw Object.assign(new Error("boom"), { code: "ESERVFAIL" });
    };
    await expect(resolveHost("x.test", failing, 100)).rejects.toMatchObject({ check: "dns", message: /ESERVFAIL/ });
    await expect(resolveHost("x.test", async () => [], 100)).rejects.toMatchObject({ check: "dns" });
    await expect(resolveHost("x.test", async () => ["x.test"], 100)).rejects.toMatchObject({ check: "dns" });
    await expect(resolveHost("x.test", async () => [42 as unknown as string], 100)).rejects.toMatchObject({ check: "dns" });
    await expect(resolveHost("x.test", async () => null as unknown as string[], 100)).rejects.toMatchObject({ check: "dns" });
    const { error, ms } = await refusal(resolveHost("x.test", () => new Promise(() => {}), 100));
    expect(error).toBeInstanceOf(EgressError);
    expect(error.message).toMatch(/longer than 100 ms/);
    expect(ms).toBeLessThan(500);
  });

  it("aborts the signal it gave the resolver when the deadline passes or the caller aborts", async () => {
    const given: AbortSignal[] = [];
    const hanging = (_host: string, signal?: AbortSignal) => {
      if (signal) given.push(signal);
      return new Promise<string[]>(() => {});
    };
    const late = await refusal(resolveHost("x.test", hanging, 100));
    expect(late.error).toMatchObject({ check: "dns", message: /longer than 100 ms/ });
    expect(given[0].aborted).toBe(true);
    expect(given[0].reason).toBe(late.error);

    const controller = new AbortController();
    const reason = new Error("the exchange ended");
    setTimeout(() => controller.abort(reason), 20);
    const cut = await failure(resolveHost("x.test", hanging, 60_000, undefined, controller.signal));
    expect(cut.error).toBe(reason);
    expect(cut.ms).toBeLessThan(1000);
    expect(given[1].aborted).toBe(true);
    // Already aborted: the resolver is never asked.
    await expect(resolveHost("x.test", hanging, 1000, undefined, controller.signal)).rejects.toBe(reason);
    expect(given).toHaveLength(2);
  });

  it("a resolver that ignores its signal still stops being waited for", async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("gone")), 20);
    const { error, ms } = await failure(resolveHost("x.test", () => new Promise(() => {}), 60_000, undefined, controller.signal));
    expect(error).toMatchObject({ message: "gone" });
    expect(ms).toBeLessThan(1000);
  });
});

/** What `promise` failed with (any error, not only an EgressError), and after how long. */
async function failure(promise: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  try {
    await promise;
  } catch (error) {
    return { error, ms: performance.now() - started };
  }
  throw new Error("expected a failure, it succeeded");
}
