import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { createSandbox } from "../../src/index.js";

/**
 * Options are read once, from own properties only: a key inherited from a polluted
 * Object.prototype is never an option, and a getter cannot pass validation and then answer
 * something else.
 */
const polluted = Object.prototype as Record<string, unknown>;

/**
 * Start `work` with Object.prototype polluted, and clean it up as soon as the call returns: the
 * options are read as the call starts, and esbuild (which compiles every run) refuses to work at
 * all while Object.prototype holds keys it does not know.
 */
function withPollution<T>(values: Record<string, unknown>, work: () => Promise<T>): Promise<T> {
  Object.assign(polluted, values);
  try {
    return work();
  } finally {
    for (const key of Object.keys(values)) delete polluted[key];
  }
}

const HOST_REACHED = `export default () => typeof process !== "undefined" ? "host reached" : "isolated"`;

describe("createSandbox options", () => {
  it('an inherited engine of "trusted" never turns the sandbox into none', async () => {
    const sandbox = await withPollution({ engine: "trusted" }, () => createSandbox({ host: "inprocess" }));
    try {
      expect(sandbox.engineName).not.toBe("trusted");
      const result = await sandbox.run({ code: HOST_REACHED });
      expect(result.ok && result.value).toBe("isolated");
    } finally {
      await sandbox.dispose();
    }
  });

  it("inherited host, policy, limits and counts are ignored", async () => {
    const sandbox = await withPollution(
      { host: "bogus", policy: { maxWallTimeMs: 1 }, maxConcurrentRuns: "x", spareInstances: 1e6, workers: 5 },
      () => createSandbox({ engine: "v8", host: "inprocess" }),
    );
    try {
      const result = await sandbox.run({ code: "export default () => 1 + 1" });
      expect(result.ok && result.value).toBe(2);
      expect(sandbox.stats().spareInstances).toBeLessThanOrEqual(2);
    } finally {
      await sandbox.dispose();
    }
  });

  it("reads each option once: a getter cannot pass the check and then answer differently", async () => {
    let reads = 0;
    const options = {
      engine: "v8" as const,
      host: "inprocess" as const,
      get memoryMb() {
        reads++;
        return reads === 1 ? 64 : ("lots" as unknown as number);
      },
    };
    const sandbox = await createSandbox(options);
    try {
      expect(reads).toBe(1);
      const result = await sandbox.run({
        code: "export default () => { const a = []; for (let i = 0; i < 40; i++) a.push(new Array(1e6).fill(i + 0.5)); return a.length }",
      });
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.error.code).toBe("ERR_MEMORY_LIMIT");
    } finally {
      await sandbox.dispose();
    }
  });

  it("reads nested options (workers) from own properties once", async () => {
    let reads = 0;
    const workers = {
      get min() {
        reads++;
        return reads === 1 ? 1 : Number.POSITIVE_INFINITY;
      },
    };
    const sandbox = await createSandbox({ engine: "v8", host: "process", workers });
    try {
      expect(reads).toBe(1);
      expect((await sandbox.run({ code: "export default () => 3" })).ok).toBe(true);
    } finally {
      await sandbox.dispose();
    }
  });

  it("bounds spareInstances, naming the option", async () => {
    await expect(createSandbox({ engine: "v8", host: "inprocess", spareInstances: 100_000 })).rejects.toThrow(
      /options\.spareInstances must be a positive integer up to 64/,
    );
    const sandbox = await createSandbox({ engine: "quickjs", host: "inprocess", spareInstances: 64 });
    await sandbox.dispose();
  });
});

describe("run and call options", () => {
  it.each([
    ["limits", { wallTimeMs: 1 }],
    ["call", { export: "nope" }],
    ["capabilities", { net: ["*"] }],
  ])("an inherited %s is ignored", async (key, value) => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    try {
      const code = "export default (x) => { const end = Date.now() + 50; while (Date.now() < end); return x * 2 }";
      const result = await withPollution({ [key]: value }, () => sandbox.run({ code, input: 21 }));
      expect(result.ok && result.value, JSON.stringify(result)).toBe(42);
      const prefix = await sandbox.prepare({ code: "export const f = (...args) => args.length" });
      const called = await withPollution({ args: [1, 2] }, () => prefix.call({ export: "f" }));
      expect(called.ok && called.value, JSON.stringify(called)).toBe(0);
    } finally {
      await sandbox.dispose();
    }
  });

  it("a key an earlier getter deleted is not read from a polluted prototype instead", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    try {
      const prefix = await sandbox.prepare({ code: "export const f = (...args) => args.length" });
      const options: Record<string, unknown> = { args: [1] };
      Object.defineProperty(options, "export", {
        enumerable: true,
        get() {
          delete options.args;
          return "f";
        },
      });
      // Keys in insertion order: "args" is listed before "export", so move it after.
      const value = options.args;
      delete options.args;
      options.args = value;
      const called = await withPollution({ args: [1, 2, 3] }, () => prefix.call(options as never));
      // The own args was deleted by the time it was read: no args (0), never the prototype's three.
      expect(called.ok && called.value, JSON.stringify(called)).toBe(0);
    } finally {
      await sandbox.dispose();
    }
  });

  it("reads a run's capabilities once", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    try {
      let reads = 0;
      const options = {
        code: "export default () => 1",
        get capabilities() {
          reads++;
          return reads === 1 ? {} : { import: ["example.com"] };
        },
      };
      const result = await sandbox.run(options);
      expect(reads).toBe(1);
      expect(result.ok && result.value).toBe(1);
    } finally {
      await sandbox.dispose();
    }
  });
});

describe("nested option data (policy.net, capabilities.net)", () => {
  it("a rule field inherited from a polluted Object.prototype never exempts an address", async () => {
    // why: policy.net was kept as the caller's object and read at every run, so an inherited
    // `internalOrigins` exempted the loopback server below from the egress check.
    const server = createServer((_request, response) => response.end("internal data"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    const origin = `http://127.0.0.1:${port}`;
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess", policy: { net: { allow: [`127.0.0.1:${port}`] } } });
    const run = () =>
      sandbox.run({
        capabilities: { net: [`127.0.0.1:${port}`] },
        code: `export default async () => {
          try { return await (await fetch(${JSON.stringify(`${origin}/`)})).text() } catch (e) { return "refused" }
        }`,
      });
    try {
      // The first run compiles the module, so the polluted one needs no esbuild (which refuses to
      // work while Object.prototype holds keys it does not know).
      const clean = await run();
      expect(clean.ok && clean.value, JSON.stringify(clean)).toBe("refused");
      polluted.internalOrigins = [origin];
      polluted.methods = ["GET"];
      let dirty: Awaited<ReturnType<typeof run>>;
      try {
        dirty = await run();
      } finally {
        delete polluted.internalOrigins;
        delete polluted.methods;
      }
      expect(dirty.ok && dirty.value, JSON.stringify(dirty)).toBe("refused");
    } finally {
      await sandbox.dispose();
      server.close();
    }
  });

  it("refuses an option array too long to be a list of rules, naming it", async () => {
    const sandbox = await createSandbox({ engine: "v8", host: "inprocess" });
    try {
      const net = new Array(1e9);
      await expect(sandbox.run({ code: "export default 1", capabilities: { net } })).rejects.toThrow(
        /capabilities\.net has more than 100000 entries/,
      );
    } finally {
      await sandbox.dispose();
    }
  });
});
