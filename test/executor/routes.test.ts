import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { refusal, SECRET, startExecutor, type TestExecutor } from "./helpers.js";

describe("routes: GET /health, POST /run, and 404 for the rest", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor();
  });
  afterAll(() => t.executor.close());

  it("GET /health says engine, host, version and load, and nothing secret", async () => {
    const response = await fetch(`${t.url}/health`);
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(JSON.parse(text)).toEqual({
      status: "ok",
      engine: expect.stringMatching(/^(v8|quickjs)$/),
      host: "process",
      version: expect.stringMatching(/^\d+\.\d+\.\d+/),
      load: { activeRuns: 0, queueDepth: 0 },
      prefixes: expect.objectContaining({ held: 0, caps: { maxPrefixes: 4096, maxPrefixesPerAddress: 2048, maxPrefixMb: 512 } }),
    });
    expect(text).not.toContain(SECRET);
  });

  it("answers every other route with a JSON 404", async () => {
    const cases: [string, string][] = [
      ["GET", "/"],
      ["GET", "/run"],
      ["POST", "/health"],
      ["POST", "/run/extra"],
      ["PUT", "/run"],
      ["GET", "/../etc/passwd"],
    ];
    for (const [method, path] of cases) {
      const response = await fetch(`${t.url}${path}`, { method, headers: { authorization: `Bearer ${SECRET}` } });
      expect(response.headers.get("content-type")).toMatch(/^application\/json/);
      expect(await refusal(response)).toMatchObject({ status: 404, code: "ERR_NOT_FOUND" });
    }
  });

  it("reports load while a run is in flight", async () => {
    const slow = t.run({ code: "export default () => new Promise((r) => setTimeout(() => r('late'), 1000))" });
    await new Promise((resolve) => setTimeout(resolve, 150));
    const health = (await (await fetch(`${t.url}/health`)).json()) as { load: { activeRuns: number } };
    expect(health.load.activeRuns).toBe(1);
    expect((await slow).status).toBe(200);
  });

  it("answers what Node's HTTP parser or hono's adapter refuses in the refusal form too (malformed, headers too large, no host)", async () => {
    const { port } = new URL(t.url);
    const raw = (request: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(Number(port), "127.0.0.1", () => socket.write(request));
        let answer = "";
        socket.on("data", (chunk) => {
          answer += chunk;
        });
        socket.on("end", () => resolve(answer));
        socket.on("error", reject);
      });
    const cases: [string, number, string?][] = [
      ["GARBAGE\r\n\r\n", 400],
      // Node answered these itself: a bare 417 with an empty body, and CONNECT with no answer at all.
      [`POST /run HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${SECRET}\r\nexpect: foo\r\ncontent-length: 2\r\n\r\n{}`, 417],
      ["GET /health HTTP/1.1\r\nhost: x\r\nexpect: foo\r\n\r\n", 417],
      ["CONNECT 127.0.0.1:22 HTTP/1.1\r\nhost: 127.0.0.1:22\r\n\r\n", 404, "ERR_NOT_FOUND"],
      // The request itself is broken after its headers (Node has made its response, unsent): still a 400.
      [`POST /run HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${SECRET}\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n`, 400],
      [`GET /health HTTP/1.1\r\nhost: x\r\nx-big: ${"a".repeat(100_000)}\r\n\r\n`, 431],
      // Refused by hono's adapter, not Node's parser: these were bare 400s.
      [`POST /run HTTP/1.0\r\nauthorization: Bearer ${SECRET}\r\ncontent-length: 2\r\n\r\n{}`, 400],
      [`POST /run HTTP/1.1\r\nhost: a b@c\r\nauthorization: Bearer ${SECRET}\r\ncontent-length: 2\r\n\r\n{}`, 400],
      ["OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n", 400],
    ];
    for (const [request, status, code = "ERR_BAD_REQUEST"] of cases) {
      const answer = await raw(request);
      expect(answer.startsWith(`HTTP/1.1 ${status} `), answer.slice(0, 40)).toBe(true);
      const body = JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4));
      expect(body.error.code).toBe(code);
      expect(body.error.message.length).toBeGreaterThan(10);
    }
    // The service still answers.
    expect((await fetch(`${t.url}/health`)).status).toBe(200);
  });

  it("never answers a run in flight with the 400 of a malformed request pipelined behind it", async () => {
    const { port } = new URL(t.url);
    const body = JSON.stringify({ code: "export default () => new Promise((r) => setTimeout(() => r('late'), 500))" });
    const request =
      `POST /run HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${SECRET}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), "127.0.0.1", () => {
        socket.write(request);
        // Once the run is in flight: garbage on the same connection.
        setTimeout(() => socket.write("GARBAGE\r\n\r\n"), 150);
      });
      let text = "";
      socket.on("data", (chunk) => {
        text += chunk;
      });
      socket.on("close", () => resolve(text));
      socket.on("error", reject);
    });
    // The connection is closed: the run's own answer (or nothing), never a 400 in its place.
    expect(answer.startsWith("HTTP/1.1 400"), answer.slice(0, 60)).toBe(false);
    expect((await fetch(`${t.url}/health`)).status).toBe(200);
  });
});
