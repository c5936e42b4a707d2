import { describe, expect, it } from "vitest";
import { normalizeSource } from "../../src/core/source.js";

describe("guest source", () => {
  it("strips TypeScript and keeps modules as modules", async () => {
    const out = await normalizeSource("const n: number = 2; export default n as number;");
    expect(out.wrapped).toBe(false);
    expect(out.code).not.toContain(": number");
  });

  it("wraps a function body with a top-level return, decided by the parser", async () => {
    const out = await normalizeSource("const x = input.a; return x * 2");
    expect(out.wrapped).toBe(true);
    expect(out.code).toMatch(/async function \w*\(input\)/);
    expect(out.code).toMatch(/export \{[^}]*as default/);
  });

  it("does not wrap text that merely mentions return", async () => {
    const out = await normalizeSource('export default function f() { return "return"; }\n// return');
    expect(out.wrapped).toBe(false);
  });

  it("reports syntax errors as ERR_COMPILE with file, line and column", async () => {
    await expect(normalizeSource("const a = ;\nexport default a", "tenant.ts")).rejects.toMatchObject({
      code: "ERR_COMPILE",
      message: expect.stringMatching(/^tenant\.ts:1:\d+: /),
    });
  });
});
