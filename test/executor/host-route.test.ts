import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sharedCodec } from "../../src/core/bindings.js";
import { DEFAULT_LIMITS } from "../../src/core/limits.js";
import { createCallbackCheck } from "../../src/executor/callback-targets.js";
import { hostRunBody, refusal, SECRET, startExecutor, type TestExecutor } from "./helpers.js";

let service: TestExecutor;
beforeAll(async () => {
  service = await startExecutor();
});
afterAll(async () => {
  await service.executor.close({ graceMs: 0 });
});

function post(body: unknown, secret: string | null = SECRET): Promise<Response> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (secret !== null) headers.authorization = `Bearer ${secret}`;
  return fetch(`${service.url}/host`, { method: "POST", headers, body: typeof body === "string" ? body : JSON.stringify(body) });
}

/** A data descriptor `levels` objects deep. */
function nested(levels: number): unknown {
  return levels === 0 ? { d: "1" } : { o: { k: nested(levels - 1) } };
}

describe("POST /host (the remote host's protocol)", () => {
  it("runs an admitted, well-formed request", async () => {
    const response = await post(await hostRunBody("export default 6 * 7"));
    expect(response.status).toBe(200);
    expect(response.headers.get("cordon-load")).toMatch(/^\d+,\d+,\d+,\d+,\d+$/);
    expect(JSON.parse(await response.text())).toMatchObject({ ok: true, value: 42 });
  });

  it("takes host modules named as long as the client allows (512 characters)", async () => {
    const name = "m".repeat(512);
    const body = {
      ...(await hostRunBody(`import m from ${JSON.stringify(name)}; export default m.n;`)),
      bindingsText: JSON.stringify({ globals: {}, modules: { [name]: { d: JSON.stringify({ n: 7 }) } } }),
    };
    const response = await post(body);
    expect(response.status, await response.clone().text()).toBe(200);
    expect(JSON.parse(await response.text())).toMatchObject({ ok: true, value: 7 });
  });

  it("refuses without the secret, or with a wrong one, before reading the body", async () => {
    const body = await hostRunBody("export default 1");
    expect((await refusal(await post(body, null))).code).toBe("ERR_UNAUTHORIZED");
    expect((await refusal(await post(body, "x".repeat(48)))).status).toBe(401);
  });

  it("refuses what is not exactly the schema, naming the field", async () => {
    const body = await hostRunBody("export default 1");
    const call = { engine: "v8", t: "prefix-call", prefix: "p1", path: "default", argsText: "[]", limits: DEFAULT_LIMITS };
    const cases: [unknown, RegExp][] = [
      [{ ...body, extra: 1 }, /extra|Unrecognized/i],
      [{ ...body, engine: "deno" }, /engine/],
      [{ ...body, limits: { ...DEFAULT_LIMITS, wallTimeMs: -1 } }, /limits\.wallTimeMs/],
      // Past 2**31-1 the guest runtime's 32-bit caps wrapped: the sandbox's own bounds apply.
      [{ ...body, limits: { ...DEFAULT_LIMITS, maxLogBytes: 1e15 } }, /limits\.maxLogBytes/],
      [{ ...body, limits: { ...DEFAULT_LIMITS, wallTimeMs: 3e9 } }, /limits\.wallTimeMs/],
      [{ ...body, bindingsText: "not json" }, /bindingsText/],
      // Each was a TypeError inside a worker, reported as the guest's own error (ERR_USER_CODE).
      [{ ...body, bindingsText: '{"modules":{"x":null}}' }, /bindingsText\.modules\["x"\]: must be \{ f, n \}/],
      [{ ...body, bindingsText: '{"globals":{"g":{"o":[1]}}}' }, /bindingsText\.globals\.g\.o: must be a JSON object/],
      [{ ...body, bindingsText: '{"globals":{"g":{"f":-1,"n":"g"}}}' }, /bindingsText\.globals\.g: must be/],
      [{ ...body, bindingsText: '{"globals":{"g":{"d":"{\\"$\\":"}}}' }, /bindingsText\.globals\.g: holds data/],
      [{ ...body, bindingsText: '{"globals":{"Object":{"d":"1"}}}' }, /globals\.Object: is not a valid global name/],
      [{ ...body, bindingsText: '{"globals":{"__cordon_x":{"d":"1"}}}' }, /not a valid global name/],
      [{ ...body, bindingsText: '{"globals":{},"extra":1}' }, /bindingsText\.extra: is not part/],
      [{ ...body, bindingsText: "[]" }, /bindingsText: must be a JSON object/],
      [{ ...body, bindingsText: JSON.stringify({ modules: { "a\u0007b": { d: "1" } } }) }, /control characters/],
      [{ ...body, bindingsText: JSON.stringify({ modules: { ["m".repeat(513)]: { d: "1" } } }) }, /bindingsText\.modules/],
      [{ ...body, bindingsText: JSON.stringify({ globals: { g: nested(12) } }) }, /nests more than 9 levels/],
      [{ ...body, t: "exec" }, /t/],
      // Read by the guest runtime, they failed there as the guest's own error (ERR_USER_CODE).
      [{ ...body, inputText: "not json" }, /inputText: must be a value in cordon's encoding/],
      [{ ...body, inputText: '{"$":"u"' }, /inputText: must be a value/],
      [{ ...call, argsText: "1" }, /argsText: must be an array/],
      // A raw separator would have made one call several in the guest's crossing.
      [{ ...call, argsText: "[1]\u0001[2]" }, /argsText: must be an array in cordon's encoding/],
      [{ ...body, callback: { url: "not a url", run: "r", grant: "g", names: [] } }, /callback\.url/],
      ["{", /UTF-8 JSON/],
    ];
    for (const [bad, message] of cases) {
      const answer = await refusal(await post(bad));
      expect(answer.status, JSON.stringify(bad).slice(0, 80)).toBe(400);
      expect(answer.message).toMatch(message);
    }
  });

  it("weighs the body before parsing it: more members or values than any host request holds is refused unparsed", async () => {
    // why: a million unknown keys held the service's thread 7 s before zod named the first issue.
    // Built by repeat(): a slow build here would stall the executor, which shares this thread.
    const members = await refusal(await post(`{${'"k":1,'.repeat(20_000)}"k":1}`));
    expect(members).toMatchObject({ status: 400, code: "ERR_BAD_REQUEST" });
    expect(members.message).toBe("the body holds more than 1000000 JSON values or 10000 object members: no valid request does");
    const values = await refusal(await post(`{"t":"run","x":[${"0,".repeat(1_000_000)}0]}`));
    expect(values.message).toMatch(/more than 1000000 JSON values/);
  });

  it("leaves the decoding of a run's values to the guest: the service's thread decodes none of them", async () => {
    // The guest decodes inputText and bindings data under its run's limits; a second decode on the
    // service's thread cost as much again, uncharged (a million keys: seconds of a held thread).
    const codec = sharedCodec();
    const inputText = codec.encode(new Map([[1, 2]]));
    const dataText = codec.encode({ k: new Date(5) });
    const decode = codec.decode;
    const decoded: string[] = [];
    // The result's own decode (the worker's answer) is counted out: only the request's texts.
    codec.decode = (text) => {
      if (text === inputText || text === dataText) decoded.push(text);
      return decode(text);
    };
    try {
      const body = {
        ...(await hostRunBody("import m from 'm'; export default (input) => [input.size, m.k.getTime()]")),
        bindingsText: JSON.stringify({ globals: {}, modules: { m: { d: dataText } } }),
        inputText,
      };
      const response = await post(body);
      expect(response.status).toBe(200);
      expect(JSON.parse(await response.text())).toMatchObject({ ok: true, value: [1, 5] });
    } finally {
      codec.decode = decode;
    }
    expect(decoded).toEqual([]);
  });

  it("a well-formed value whose tag the guest cannot read fails the run, not the service", async () => {
    const body = { ...(await hostRunBody("export default (input) => input")), inputText: '{"$":"b","v":"not digits"}' };
    const response = await post(body);
    expect(response.status).toBe(200);
    expect(JSON.parse(await response.text())).toMatchObject({ ok: false, status: "failed" });
  });

  it("a prefix handle it does not hold is ERR_PREFIX_GONE (the client prepares again)", async () => {
    const answer = await refusal(
      await post({
        engine: "v8",
        t: "prefix-call",
        prefix: "no-such-prefix",
        path: "default",
        argsText: "[]",
        limits: DEFAULT_LIMITS,
      }),
    );
    expect(answer).toMatchObject({ status: 404, code: "ERR_PREFIX_GONE" });
  });

  it("clamps a client's limits with the service's policy, never widening them", async () => {
    const strict = await startExecutor({ sandbox: { policy: { maxWallTimeMs: 500 } } });
    try {
      const body = await hostRunBody("export default () => new Promise(() => {})");
      const started = performance.now();
      const response = await fetch(`${strict.url}/host`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
        body: JSON.stringify({ ...body, limits: { ...DEFAULT_LIMITS, wallTimeMs: 1e9, cpuTimeMs: 1e9 } }),
      });
      const result = JSON.parse(await response.text()) as { error: { code: string } };
      expect(result.error.code).toBe("ERR_WALL_TIMEOUT");
      expect(performance.now() - started).toBeLessThan(10_000);
    } finally {
      await strict.executor.close({ graceMs: 0 });
    }
  });

  it("calls back only to the requester, loopback, or an origin the operator named (no SSRF through the executor)", async () => {
    const body = await hostRunBody("export default 1");
    const callback = (url: string) => ({ ...body, callback: { url, run: "r", grant: "g", names: ["globals.f"] } });
    for (const url of [
      "http://10.1.2.3:8080/rpc",
      "http://169.254.169.254/latest",
      "http://internal.example:80/",
      "http://u:p@127.0.0.1:1/",
    ]) {
      const answer = await refusal(await post(callback(url)));
      expect(answer.status, url).toBe(400);
      expect(answer.message).toMatch(/callback\.url/);
    }
    expect((await post(callback("http://127.0.0.1:1/rpc"))).status).toBe(200);
    expect((await post(callback("http://localhost:1/rpc"))).status).toBe(200);
    const named = await startExecutor({ callbackOrigins: ["http://203.0.113.7:9000"] });
    try {
      const response = await fetch(`${named.url}/host`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
        body: JSON.stringify(callback("http://203.0.113.7:9000/rpc")),
      });
      expect(response.status).toBe(200);
    } finally {
      await named.executor.close({ graceMs: 0 });
    }
  });

  it("the requester's own address is allowed, v4-mapped or not", () => {
    const check = createCallbackCheck();
    expect(check("http://192.0.2.5:8080/rpc", "::ffff:192.0.2.5")).toBeUndefined();
    expect(check("http://[2001:db8::5]:8080/rpc", "2001:db8::5")).toBeUndefined();
    expect(check("http://192.0.2.6:8080/rpc", "::ffff:192.0.2.5")).toMatch(/not allowed/);
    expect(check("ftp://127.0.0.1/", "127.0.0.1")).toMatch(/http/);
  });

  it("calls back to loopback only for a requester on loopback: one elsewhere cannot reach the executor's local services", () => {
    // why: loopback was allowed for every requester, so a tenant on another machine could have the
    // executor POST to 127.0.0.1:<any port> and read the status and the error text in its run.
    const check = createCallbackCheck();
    for (const url of ["http://127.0.0.1:6379/", "http://127.9.9.9:80/", "http://[::1]:8500/", "http://localhost:2375/"]) {
      expect(check(url, "192.0.2.5"), url).toMatch(/not allowed/);
      expect(check(url, undefined), url).toMatch(/not allowed/);
    }
    expect(check("http://127.0.0.1:1/rpc", "127.0.0.1")).toBeUndefined();
    expect(check("http://127.0.0.1:1/rpc", "::ffff:127.0.0.1")).toBeUndefined();
    expect(check("http://localhost:1/rpc", "::1")).toBeUndefined();
    expect(check("http://[::1]:1/rpc", "127.0.0.1")).toBeUndefined();
  });
});
