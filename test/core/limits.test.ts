import { describe, expect, it } from "vitest";
import { DEFAULT_LIMITS, checkLimits, checkPolicy, resolveLimits } from "../../src/core/limits.js";
import { RESERVED_GLOBAL_NAMES, isValidExportName, isValidExportPath, isValidGlobalName } from "../../src/names.js";

describe("limits", () => {
  it("defaults cpu to wall and clamps memory to 8..1024", () => {
    expect(resolveLimits({}, {}, {})).toEqual(DEFAULT_LIMITS);
    expect(resolveLimits({ wallTimeMs: 100 }, {}, {}).cpuTimeMs).toBe(100);
    expect(resolveLimits({ memoryMb: 1 }, {}, {}).memoryMb).toBe(8);
    expect(resolveLimits({ memoryMb: 99999 }, {}, {}).memoryMb).toBe(1024);
  });

  it("a policy only ever narrows", () => {
    const policy = { maxMemoryMb: 64, maxWallTimeMs: 1000, maxCpuTimeMs: 200 };
    const wide = resolveLimits({ memoryMb: 512, wallTimeMs: 60_000, cpuTimeMs: 60_000 }, {}, policy);
    expect(wide).toMatchObject({ memoryMb: 64, wallTimeMs: 1000, cpuTimeMs: 200 });
    const narrow = resolveLimits({ memoryMb: 16, wallTimeMs: 50 }, {}, policy);
    expect(narrow).toMatchObject({ memoryMb: 16, wallTimeMs: 50, cpuTimeMs: 50 });
  });

  it("cpu never exceeds wall", () => {
    expect(resolveLimits({ wallTimeMs: 100, cpuTimeMs: 500 }, {}, {}).cpuTimeMs).toBe(100);
  });

  it("bad limits throw a TypeError naming the option", () => {
    expect(() => checkLimits({ memoryMb: -5 })).toThrow(TypeError);
    expect(() => checkLimits({ memoryMb: -5 })).toThrow(/limits\.memoryMb must be a positive number up to \d+, got -5/);
    expect(() => checkLimits({ wallTimeMs: "10" })).toThrow(/limits\.wallTimeMs/);
    expect(() => checkLimits({ walltime: 10 })).toThrow(/limits\.walltime is not a limit/);
    expect(() => checkLimits([])).toThrow(/limits must be an object/);
  });

  it("refuses limits no engine or pipe can carry: Infinity, timers past 2^31 ms, counts past 32 bits", () => {
    // Infinity crossed to worker processes as JSON null (enforced as 0); a wall time of 2^31 ms
    // fired Node's timers after 1 ms; caps of 2^31 wrapped in v8's 32-bit shared memory.
    expect(() => checkLimits({ wallTimeMs: Number.POSITIVE_INFINITY })).toThrow(
      /limits\.wallTimeMs must be a positive number up to 2000000000, got Infinity/,
    );
    expect(() => checkLimits({ wallTimeMs: 2 ** 31 })).toThrow(/limits\.wallTimeMs/);
    expect(() => checkLimits({ maxOutputBytes: 2 ** 31 })).toThrow(
      /limits\.maxOutputBytes must be a positive number up to 2147483647/,
    );
    expect(() => checkLimits({ maxBridgeCalls: Number.POSITIVE_INFINITY })).toThrow(/limits\.maxBridgeCalls/);
    expect(checkLimits({ wallTimeMs: 2_000_000_000, maxOutputBytes: 2 ** 31 - 1 })).toEqual({
      wallTimeMs: 2_000_000_000,
      maxOutputBytes: 2 ** 31 - 1,
    });
    expect(() => checkPolicy({ maxWallTimeMs: Number.POSITIVE_INFINITY })).toThrow(/policy\.maxWallTimeMs/);
    // A ceiling below the smallest instance would be raised to it, not honoured.
    expect(() => checkPolicy({ maxMemoryMb: 2 })).toThrow(/policy\.maxMemoryMb must be at least 8/);
  });

  it("resolves what was checked: a getter is read once, an inherited key is never a limit", () => {
    let reads = 0;
    const tricky = {
      get cpuTimeMs() {
        reads++;
        return reads === 1 ? 100 : "x";
      },
    };
    const limits = resolveLimits(checkLimits(tricky), {}, checkPolicy({ maxWallTimeMs: 500 }));
    expect(limits.cpuTimeMs).toBe(100);
    expect(reads).toBe(1);
    const polluted = Object.prototype as Record<string, unknown>;
    polluted.wallTimeMs = "abc";
    polluted.maxCpuTimeMs = "abc";
    try {
      const resolved = resolveLimits(checkLimits({}), {}, checkPolicy({}));
      expect(resolved.wallTimeMs).toBe(DEFAULT_LIMITS.wallTimeMs);
      expect(resolved.cpuTimeMs).toBe(DEFAULT_LIMITS.cpuTimeMs);
    } finally {
      delete polluted.wallTimeMs;
      delete polluted.maxCpuTimeMs;
    }
  });
});

describe("cordon/names", () => {
  it("accepts identifiers and refuses reserved, runtime and intrinsic names", () => {
    expect(isValidGlobalName("fetchUser")).toBe(true);
    for (const name of ["console", "setTimeout", "Object", "eval", "class", "__cordon_x", "a-b", "", "1x", "fetch"]) {
      expect(isValidGlobalName(name), name).toBe(false);
    }
    expect(RESERVED_GLOBAL_NAMES.has("globalThis")).toBe(true);
  });

  it("validates export names and dotted call paths", () => {
    expect(isValidExportName("default")).toBe(true);
    expect(isValidExportName("handleEvent")).toBe(true);
    expect(isValidExportName("class")).toBe(false);
    expect(isValidExportPath("default.fetch")).toBe(true);
    expect(isValidExportPath("default..fetch")).toBe(false);
    expect(isValidExportPath("a.b-c")).toBe(false);
    // Any identifier JavaScript accepts, Unicode ones too; still no spaces, dashes or digits first.
    expect(isValidExportName("café")).toBe(true);
    expect(isValidExportPath("ünits.名前")).toBe(true);
    expect(isValidExportPath("a\u200Cb.c")).toBe(true);
    for (const path of ["café-x", "1ü", "a b", "é.", "\u200Ca"]) expect(isValidExportPath(path), path).toBe(false);
    // Host globals stay ASCII.
    expect(isValidGlobalName("café")).toBe(false);
  });
});
