import { format } from "node:util";
import { decodeUnweighed, sharedCodec } from "../../core/bindings.js";
import type { BindingDesc } from "../../core/bindings.js";
import type { Engine, EnginePrefix, EnginePrepareRequest, EngineRunRequest, EngineStats } from "../../core/engine.js";
import { CordonError, type RunError } from "../../core/errors.js";
import { readBodiesWithin } from "../../core/body-reads.js";
import { needsBodies } from "../../core/fetch-wire.js";
import { guestThrown } from "../../core/guest-errors.js";
import { msSince } from "../../core/milliseconds.js";
import type { LogEntry, LogLevel, RunResult } from "../../core/types.js";

const LEVELS: LogLevel[] = ["log", "info", "warn", "error", "debug"];
let runCounter = 0;

/**
 * The trusted engine: NO SANDBOX. The module is imported into this process (from a data: URL)
 * and runs with everything the host has — `process`, the file system, the network. It exists
 * for code you wrote yourself (tests, local development) that should speak the same contract.
 *
 * Runs are serialized by a mutex, because globals and `console` are swapped on the host's own
 * global object for the length of a run and restored after it. The wall time is a soft timeout:
 * the result says ERR_WALL_TIMEOUT, the code keeps running (nothing can stop it), and the next
 * run may start. Every run's module stays in Node's module cache (Node cannot evict it).
 * Only chosen when named; `auto` never picks it. Nothing it decodes is weighed
 * (codec-containers.ts): its code runs on the host's thread already, and the host's own texts
 * (input, arguments, answers, data) are not weighed on v8 and QuickJS either.
 */
export class TrustedEngine implements Engine {
  readonly name = "trusted" as const;
  private tail: Promise<unknown> = Promise.resolve();

  run(request: EngineRunRequest): Promise<RunResult> {
    const result = this.tail.then(() => this.runNow(request));
    this.tail = result.catch(() => undefined);
    return result;
  }

  async prepare(_request: EnginePrepareRequest): Promise<{ prefix: EnginePrefix; result: RunResult }> {
    throw new CordonError(
      "ERR_ENGINE_UNAVAILABLE",
      'cordon: the trusted engine runs one-off runs only; prepare needs "v8" or "quickjs"',
    );
  }

  stats(): EngineStats {
    return { warmInstances: 0, idleInstances: 0, idleHeapBytes: 0, budgetBytes: 0, spareInstances: 0, prefixes: [] };
  }

  async dispose(): Promise<void> {
    await this.tail;
  }

  private async runNow(request: EngineRunRequest): Promise<RunResult> {
    const started = performance.now();
    const cpuStart = process.cpuUsage();
    const logs: LogEntry[] = [];
    const codec = sharedCodec();
    const { limits } = request;
    const stats = () => {
      const cpu = process.cpuUsage(cpuStart);
      return {
        engine: "trusted" as const,
        host: "inprocess" as const,
        wallMs: msSince(started),
        cpuMs: Math.round((cpu.user + cpu.system) / 10) / 100,
        bridgeCalls: 0,
        warm: false,
      };
    };
    const failed = (error: RunError): RunResult => ({ status: "failed", ok: false, error, logs, stats: stats() });

    const bindings = JSON.parse(request.bindings.text) as {
      globals: Record<string, BindingDesc>;
      modules: Record<string, unknown>;
    };
    if (Object.keys(request.sourceImports).length > 0 || Object.keys(bindings.modules).length > 0) {
      return failed({
        code: "ERR_MODULE_NOT_FOUND",
        name: "CordonError",
        message: "the trusted engine runs single modules: imports are not supported",
      });
    }
    const restore = this.install(bindings.globals, request, logs, started);
    let timer: NodeJS.Timeout | undefined;
    try {
      const work = (async () => {
        // A unique URL per run: Node caches modules by URL, and runs must not share one.
        const url = `data:text/javascript;base64,${Buffer.from(`${request.source.code}\n//# run=${++runCounter}`).toString("base64")}`;
        const ns = (await import(url)) as Record<string, unknown>;
        if (request.mode === "call") return { ns, value: await callExport(ns, decodeUnweighed(request.inputText) as CallInput) };
        // What the default export is, as the guest runtime reports it (readExports): not called.
        if (request.mode === "prepare") return { ns, value: "default" in ns ? typeof ns.default : null };
        const main = ns.default;
        const value = typeof main === "function" ? await main(decodeUnweighed(request.inputText)) : await main;
        return { ns, value };
      })();
      const timeout = new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), limits.wallTimeMs);
      });
      const outcome = await Promise.race([work, timeout]);
      if (outcome === "timeout") {
        work.catch(() => undefined);
        return failed({
          code: "ERR_WALL_TIMEOUT",
          name: "CordonError",
          message: `the run exceeded its wall time limit of ${limits.wallTimeMs} ms (soft: the trusted engine cannot stop it)`,
        });
      }
      // Values cross as data here too: the same codec, the same limits on size. A Response's
      // body is read first (the codec encodes synchronously).
      if (needsBodies([outcome.value])) {
        // Within the run's limits: an endless body is refused past maxOutputBytes, a stalled one
        // ends with the wall time left.
        const ms = Math.max(0, limits.wallTimeMs - (performance.now() - started));
        const read = await readBodiesWithin([outcome.value], { ms, maxBytes: limits.maxOutputBytes });
        if (read === "too-large") {
          const message = `value's body is larger than the limit of ${limits.maxOutputBytes} bytes`;
          return failed({ code: "ERR_OUTPUT_TOO_LARGE", name: "CordonError", message });
        }
        if (read === "timed-out") {
          const message = `the run exceeded its wall time limit of ${limits.wallTimeMs} ms reading its value's body`;
          return failed({ code: "ERR_WALL_TIMEOUT", name: "CordonError", message });
        }
        if (typeof read === "object") throw read.failed;
      }
      const value = decodeUnweighed(codec.encode(outcome.value, "value", limits.maxOutputBytes));
      const exports: Record<string, unknown> = {};
      const skippedExports: string[] = [];
      for (const [key, item] of Object.entries(outcome.ns)) {
        if (key === "default") continue;
        try {
          if (typeof item === "function") throw new TypeError("a function");
          exports[key] = decodeUnweighed(codec.encode(item, `exports.${key}`));
        } catch {
          skippedExports.push(key);
        }
      }
      return { status: "completed", ok: true, value, exports, skippedExports, logs, stats: stats() };
    } catch (error) {
      const code = (error as { code?: unknown })?.code;
      if (code === "ERR_NOT_SERIALIZABLE" || code === "ERR_OUTPUT_TOO_LARGE") {
        return failed({ code, name: "TypeError", message: (error as Error).message });
      }
      if (error instanceof CordonError) return failed({ code: error.code, name: "CordonError", message: error.message });
      return failed(guestThrown(error, new Set()));
    } finally {
      clearTimeout(timer);
      restore();
    }
  }

  /** Put the run's globals and a capturing console on the host's global object; returns the undo. */
  private install(
    globals: Record<string, BindingDesc>,
    request: EngineRunRequest,
    logs: LogEntry[],
    started: number,
  ): () => void {
    const g = globalThis as unknown as Record<string, unknown>;
    const codec = sharedCodec();
    const saved = new Map<string, PropertyDescriptor | undefined>();
    const set = (name: string, value: unknown) => {
      if (!saved.has(name)) saved.set(name, Object.getOwnPropertyDescriptor(g, name));
      Object.defineProperty(g, name, { value, writable: true, configurable: true, enumerable: false });
    };
    const build = (desc: BindingDesc): unknown => {
      if ("f" in desc) {
        const fnId = desc.f;
        return async (...args: unknown[]) => {
          const answer = await request.bindings.dispatch(fnId, codec.encode(args, "args"));
          const decoded = decodeUnweighed(answer.text);
          if (!answer.ok) throw decoded;
          return decoded;
        };
      }
      if ("d" in desc) return decodeUnweighed(desc.d);
      return Object.fromEntries(Object.entries(desc.o).map(([k, v]) => [k, build(v)]));
    };
    for (const [name, desc] of Object.entries(globals)) set(name, build(desc));
    const { maxLogEntries, maxLogBytes } = request.limits;
    let bytes = 0;
    const capture =
      (level: LogLevel) =>
      (...args: unknown[]) => {
        const message = format(...args);
        if (logs.length >= maxLogEntries || bytes + message.length > maxLogBytes) return;
        bytes += message.length;
        logs.push({ level, message, atMs: msSince(started) });
      };
    set("console", { ...console, ...Object.fromEntries(LEVELS.map((level) => [level, capture(level)])) });
    return () => {
      for (const [name, descriptor] of saved) {
        if (descriptor) Object.defineProperty(g, name, descriptor);
        else delete g[name];
      }
    };
  }
}

type CallInput = { export: string; args: unknown[] };

/** `run({ call })`: the export path's function, called with `this` bound to its owner. */
function callExport(ns: Record<string, unknown>, { export: path, args }: CallInput): unknown {
  let owner: unknown;
  let target: unknown = ns;
  for (const part of path.split(".")) {
    if (target === null || (typeof target !== "object" && typeof target !== "function") || !(part in target)) {
      target = undefined;
      break;
    }
    owner = target;
    target = (target as Record<string, unknown>)[part];
  }
  if (typeof target !== "function") {
    throw new CordonError("ERR_CALL_TARGET_NOT_FOUND", `the module has no function at export path "${path}"`);
  }
  return Reflect.apply(target, owner, args);
}
