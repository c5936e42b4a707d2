import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SECRET, startExecutor, type TestExecutor } from "./helpers.js";

describe("service logs: JSON lines with outcomes, never secrets, code or input", () => {
  let t: TestExecutor;
  const marker = "PRIVATE-INPUT-7f3a";
  const codeMarker = "PRIVATE_CODE_91b2";
  beforeAll(async () => {
    t = await startExecutor();
    await t.runResult({ code: `export default (i) => { const ${codeMarker} = i; console.log(i); return i }`, input: marker });
    await t.runResult({ code: `export default () => { throw new Error('${codeMarker}') }` });
    await t.run({ code: codeMarker, input: marker, extra: 1 });
    await t.run({ code: "return 1" }, { secret: "wrong" });
  });
  afterAll(() => t.executor.close());

  it("starts with the address it listens on", () => {
    expect(t.logs[0]).toMatchObject({ event: "listening", address: t.url.replace("http://", ""), host: "process" });
  });

  it("logs one line per run with its outcome", () => {
    const runs = t.logs.filter((line) => line.event === "run");
    expect(runs).toHaveLength(2);
    expect(runs[0]).toMatchObject({ status: "completed", host: "process", warm: false });
    expect(runs[0]).toHaveProperty("wallMs");
    expect(runs[0]).toHaveProperty("cpuMs");
    expect(runs[0]).toHaveProperty("engine");
    expect(runs[1]).toMatchObject({ status: "failed", code: "ERR_USER_CODE" });
  });

  it("logs refusals with status and code only", () => {
    const refused = t.logs.filter((line) => line.event === "refused");
    expect(refused.map((line) => [line.status, line.code])).toEqual([
      [400, "ERR_BAD_REQUEST"],
      [401, "ERR_UNAUTHORIZED"],
    ]);
  });

  it("never contains the secret, the code, the input or guest output", () => {
    const text = t.logText();
    for (const forbidden of [SECRET, marker, codeMarker]) expect(text).not.toContain(forbidden);
  });
});
