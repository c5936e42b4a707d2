import { spawnSync } from "node:child_process";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createExecutor } from "../../src/executor/server.js";
import { refusal, SECRET, startExecutor, type TestExecutor } from "./helpers.js";

const BIN = fileURLToPath(new URL("../../bin/cordon.js", import.meta.url));
const body = { code: "export default (i) => i.n * 2", input: { n: 21 } };

describe("admission: authorization: Bearer <secret>", () => {
  let t: TestExecutor;
  beforeAll(async () => {
    t = await startExecutor();
  });
  afterAll(() => t.executor.close());

  it("refuses a request without the header, with a 401 and a challenge", async () => {
    const response = await t.run(body, { secret: null });
    expect(response.headers.get("www-authenticate")).toMatch(/^Bearer/);
    expect(await refusal(response)).toMatchObject({ status: 401, code: "ERR_UNAUTHORIZED" });
  });

  it("refuses a wrong secret, whatever its length, and another scheme", async () => {
    for (const wrong of [`${SECRET.slice(0, -1)}X`, "x", `${SECRET}${SECRET}`, SECRET.slice(0, 31)]) {
      expect(await refusal(await t.run(body, { secret: wrong }))).toMatchObject({ status: 401, code: "ERR_UNAUTHORIZED" });
    }
    const basic = await fetch(`${t.url}/run`, {
      method: "POST",
      headers: { authorization: `Basic ${Buffer.from(`u:${SECRET}`).toString("base64")}` },
      body: JSON.stringify(body),
    });
    expect(basic.status).toBe(401);
  });

  // The README: "The bearer is compared in constant time ... before any of the body is read."
  it("refuses a wrong secret before the body arrives: the 401 comes for the head alone", async () => {
    const { hostname, port } = new URL(t.url);
    for (const route of ["/run", "/host"]) {
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = connect(Number(port), hostname);
        let text = "";
        socket.setEncoding("latin1");
        socket.on("data", (chunk: string) => {
          text += chunk;
          if (text.includes("\r\n\r\n")) {
            socket.destroy();
            resolve(text);
          }
        });
        socket.on("error", reject);
        socket.setTimeout(5000, () => {
          socket.destroy();
          resolve(`no answer; got ${JSON.stringify(text)}`);
        });
        // 8 MiB declared (under the 32 MiB cap), not one byte of it sent.
        socket.write(
          `POST ${route} HTTP/1.1\r\nhost: ${hostname}\r\nauthorization: Bearer ${SECRET.slice(0, -1)}X\r\ncontent-type: application/json\r\ncontent-length: ${8 * 1024 * 1024}\r\n\r\n`,
        );
      });
      expect(answer, route).toMatch(/^HTTP\/1\.1 401 /);
    }
  });

  it("answers expect: 100-continue with 100 only for the right secret; a wrong one gets its 401 at once", async () => {
    // why: Node sent "100 Continue" to every such request before a route ran, inviting a client
    // without the secret to send its body (read and thrown away while the connection closed).
    const { hostname, port } = new URL(t.url);
    const payload = JSON.stringify(body);
    const exchange = (secret: string, more = "") =>
      new Promise<{ invited: boolean; status: string }>((resolve, reject) => {
        const socket = connect(Number(port), hostname);
        let text = "";
        let invited = false;
        socket.setEncoding("latin1");
        socket.on("data", (chunk: string) => {
          text += chunk;
          const interim = /^HTTP\/1\.1 100 [^\r]*\r\n\r\n/.exec(text);
          if (interim) {
            // Invited: send the body, then read the final answer.
            invited = true;
            text = text.slice(interim[0].length);
            socket.write(payload);
          }
          if (text.includes("\r\n\r\n")) {
            socket.destroy();
            resolve({ invited, status: text.slice(0, text.indexOf("\r\n")) });
          }
        });
        socket.on("error", reject);
        socket.write(
          `POST /run HTTP/1.1\r\nhost: ${hostname}\r\nauthorization: Bearer ${secret}\r\n${more}expect: 100-continue\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n\r\n`,
        );
      });
    expect(await exchange(`${SECRET.slice(0, -1)}X`)).toEqual({ invited: false, status: "HTTP/1.1 401 Unauthorized" });
    expect(await exchange(SECRET)).toEqual({ invited: true, status: "HTTP/1.1 200 OK" });
    // A second authorization header: the route reads both (and refuses), so nothing is invited.
    // (Node's `headers` keeps only the first: the body was invited, then refused.)
    expect(await exchange(SECRET, "authorization: Bearer x\r\n")).toEqual({
      invited: false,
      status: "HTTP/1.1 401 Unauthorized",
    });
  });

  it("admits the right secret", async () => {
    const result = await t.runResult(body);
    expect(result).toMatchObject({ status: "completed", value: 42 });
  });

  it("never logs the secret or the authorization header", () => {
    expect(t.logText()).not.toContain(SECRET);
    expect(t.logText().toLowerCase()).not.toContain("bearer");
  });
});

describe("a secret shorter than 32 bytes", () => {
  it("makes createExecutor throw a TypeError that states the minimum", async () => {
    await expect(createExecutor({ secret: "short-secret", port: 0, logger: false })).rejects.toThrow(TypeError);
    await expect(createExecutor({ secret: "x".repeat(31), port: 0, logger: false })).rejects.toThrow(/at least 32 bytes/);
    // A header is trimmed and carries visible ASCII: such a secret started a service that refused every client.
    await expect(createExecutor({ secret: `${"x".repeat(40)}\n`, port: 0, logger: false })).rejects.toThrow(/visible ASCII/);
    await expect(createExecutor({ secret: ` ${"x".repeat(40)}`, port: 0, logger: false })).rejects.toThrow(/visible ASCII/);
    await expect(createExecutor({ secret: "é".repeat(40), port: 0, logger: false })).rejects.toThrow(/visible ASCII/);
  });

  it("makes `cordon serve` exit 2 with the minimum, and without echoing the secret", () => {
    // why: the real command line, through bin/cordon.js and the built dist/ (npm run build first).
    const tiny = "tiny-but-private";
    const out = spawnSync(process.execPath, [BIN, "serve", "--port", "0"], {
      encoding: "utf8",
      timeout: 20_000,
      env: { ...process.env, CORDON_EXEC_SECRET: tiny },
    });
    expect(out.status).toBe(2);
    expect(out.stderr).toContain("at least 32 bytes");
    expect(out.stderr + out.stdout).not.toContain(tiny);
    // why: set but empty (an unset variable expanded by mistake) fails closed, not to a generated secret.
    const empty = spawnSync(process.execPath, [BIN, "serve", "--port", "0"], {
      encoding: "utf8",
      timeout: 20_000,
      env: { ...process.env, CORDON_EXEC_SECRET: "" },
    });
    expect(empty.status).toBe(2);
    expect(empty.stderr).toContain("at least 32 bytes");
  });
});
