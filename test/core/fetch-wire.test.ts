import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it, vi } from "vitest";
import { sharedCodec } from "../../src/core/bindings.js";
import { needsBodies, readBodies } from "../../src/core/fetch-wire.js";

/** The host's wire for Request and Response (src/core/fetch-wire.ts), through the host's codec. */
const codec = sharedCodec();
const UNREAD = /^a Response crosses only in a call's arguments, a run's input or a returned value, at most 2 levels inside/;
const USED = "its body was already read (bodyUsed): pass one whose body is unread";

/** A Response as the host gets one from a guest: decoded from the wire. */
async function decodedResponse(body: string): Promise<Response> {
  const made = new Response(body, { status: 201 });
  await readBodies([made]);
  return codec.decode(codec.encode(made, "value")) as Response;
}

describe("the host's fetch wire", () => {
  it("passes a decoded message on from any depth, with the body it was decoded with", async () => {
    // The process host's worker re-encodes what its engine decoded: from a Map, 3 levels deep.
    const response = await decodedResponse("deep");
    const again = codec.decode(codec.encode({ a: { b: { c: new Map([[1, response]]) } } }, "value")) as {
      a: { b: { c: Map<number, Response> } };
    };
    const crossed = again.a.b.c.get(1) as Response;
    expect([crossed.status, await crossed.text()]).toEqual([201, "deep"]);
    // The original still has its own body.
    expect(await response.text()).toBe("deep");
  });

  it("refuses a decoded message whose body was read since, as it refuses any other", async () => {
    const response = await decodedResponse("once");
    await response.text();
    expect(() => codec.encode({ a: { b: { r: response } } }, "value")).toThrow(USED);
    await expect(readBodies([response])).rejects.toThrow(USED);
  });

  it("still refuses a message made here, whose body was never read, where bodies are not read", () => {
    expect(() => codec.encode({ a: { b: { r: new Response("x") } } }, "value")).toThrow(UNREAD);
  });

  it('carries a Request\'s redirect mode (absent for the default, "follow") and refuses another value', async () => {
    for (const redirect of ["follow", "manual", "error"] as const) {
      const request = new Request("http://a.example/", { redirect });
      await readBodies([request]);
      const text = codec.encode(request, "value");
      expect(JSON.parse(text).r).toBe(redirect === "follow" ? undefined : redirect);
      expect((codec.decode(text) as Request).redirect).toBe(redirect);
    }
    expect(() => codec.decode('{"$":"Q","m":"GET","u":"http://a.example/","h":[],"b":null,"r":"bogus"}')).toThrow(
      "Malformed fetch wire value: redirect",
    );
  });

  it("a message without a body is known at once: no clone, no read; one with a body still is read", async () => {
    // Read like the others, each GET Request of a call cost a clone, a timer and an AbortController.
    const clone = vi.spyOn(Request.prototype, "clone");
    try {
      const get = new Request("http://a.example/get", { headers: { "x-a": "1" } });
      expect(needsBodies([{ request: get }])).toBe(false);
      expect(clone).not.toHaveBeenCalled();
      const crossed = codec.decode(codec.encode({ request: get }, "value")) as { request: Request };
      expect([crossed.request.method, crossed.request.url, crossed.request.headers.get("x-a"), crossed.request.body]).toEqual([
        "GET",
        "http://a.example/get",
        "1",
        null,
      ]);
      const post = new Request("http://a.example/post", { method: "POST", body: "payload" });
      expect(needsBodies([get, post])).toBe(true);
      await readBodies([get, post]);
      expect(clone).toHaveBeenCalledTimes(1);
      const again = codec.decode(codec.encode(post, "value")) as Request;
      expect(await again.text()).toBe("payload");
      // Not where bodies are read (a global): still refused, with or without a body.
      expect(() => codec.encode({ a: { b: { r: new Request("http://a.example/") } } }, "value")).toThrow(/crosses only in/);
    } finally {
      clone.mockRestore();
    }
  });

  it("refuses more than 10,000 header entries in one value where they are made, and where they are read", () => {
    const many = Array.from({ length: 10_001 }, (_, i): [string, string] => [`h${i}`, "v"]);
    // The codec's own refusal, at the path of the value that went past the bound.
    expect(() => codec.encode(new Headers(many), "value")).toThrow(
      expect.objectContaining({
        code: "ERR_NOT_SERIALIZABLE",
        path: "value",
        message: "value brings the header entries of one crossing to 10001; at most 10000 cross at once",
      }),
    );
    // In all its Headers together: one of 6,000 twice (the same object) is 12,000.
    const half = new Headers(many.slice(0, 6_000));
    expect(() => codec.encode([half, half], "value")).toThrow(
      expect.objectContaining({ code: "ERR_NOT_SERIALIZABLE", path: "value[1]", message: expect.stringContaining("to 12000;") }),
    );
    // Counted per value: the next one starts over.
    expect(codec.encode(half, "value").length).toBeGreaterThan(0);
    // What no encoder here makes (a guest realm's, tampered with) is refused by the decoder too.
    expect(() => codec.decode(JSON.stringify({ $: "H", h: many }))).toThrow(
      /the value holds 10001 header entries; at most 10000 cross/,
    );
    const twice = JSON.stringify([
      { $: "H", h: many.slice(0, 6_000) },
      { $: "H", h: many.slice(0, 6_000) },
    ]);
    expect(() => codec.decode(twice)).toThrow(/the value holds 12000 header entries/);
    expect([...(codec.decode(JSON.stringify({ $: "H", h: many.slice(1) })) as Headers)]).toHaveLength(10_000);
  });

  it("plain values cross without loading Node's fetch (undici): a worker's start does not pay for it", () => {
    // why: resetting the per-value header count made the wire, and so loaded undici, at a
    // process host worker's first encode (54 ms of its start).
    const bindings = fileURLToPath(new URL("../../dist/core/bindings.js", import.meta.url));
    const script = `import(${JSON.stringify(bindings)}).then(({ sharedCodec }) => {
      const codec = sharedCodec();
      codec.decode(codec.encode({ a: [1, new Date(0), new Map([[1, 2]])], e: new Error("x") }));
      const undici = () => Object.getOwnPropertySymbols(globalThis).filter((s) => String(s).includes("undici")).length;
      const before = undici();
      codec.encode(new Headers({ a: "1" }));
      console.log(JSON.stringify([before, undici() > 0]));
    })`;
    expect(JSON.parse(execFileSync(process.execPath, ["-e", script], { encoding: "utf8" }))).toEqual([0, true]);
  });
});
