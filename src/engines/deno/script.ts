import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync, statSync, writeFileSync } from "node:fs";
import { builtinModules, createRequire } from "node:module";
import { dirname, join } from "node:path";
import { codecSource } from "../../core/codec.js";
import { createFetchWire } from "../../core/fetch-wire.js";
import { MAX_PENDING_HOST_CALLS, MAX_PENDING_TIMERS, MAX_TIMER_MS, PENDING_ARGS_FACTOR } from "../../core/limits.js";
import { TEXT_FIELDS } from "../../core/framing.js";
import { createInspect } from "../guest/inspect.js";
import { installRuntime } from "../guest/runtime.js";
import { type DenoGuestConfig, denoGuestMain } from "./bootstrap.js";
import { privateTempDir } from "./private-dir.js";
import { createPendingWatch } from "./pending.js";
import { createReset } from "./reset.js";

/**
 * Deno's Node compatibility reads `Atomics` and `process` when its core modules first load: these
 * load before the bootstrap removes those globals (every other builtin then loads on demand; a
 * test imports each one). Loading all of them instead costs ~70 ms of CPU per process.
 */
export const PRELOADED_NODE_BUILTINS = ["buffer", "util", "process", "events", "stream", "timers", "domain"];

/** Node builtins a guest may import (Deno provides them). */
export const NODE_BUILTINS = builtinModules.filter((name) => !name.startsWith("_"));

/**
 * The bootstrap module a Deno process runs: one indirect eval of the runtime, named `<cordon>`,
 * so no runtime frame names a host path. Written once, named by the hash of its content, into a
 * directory every cordon process of this user shares (the Deno processes may read it; they may
 * write only their private directories), so nothing is left behind per host process.
 */
let shared: { main: string } | undefined;

export function bootstrapFile(): { main: string } {
  if (shared) return shared;
  const script = `(function () {
"use strict";
const parts = {
  createCodec: ${codecSource()},
  createInspect: (${createInspect.toString()}),
  createFetchWire: (${createFetchWire.toString()}),
  installRuntime: (${installRuntime.toString()}),
  createReset: (${createReset.toString()}),
  createPendingWatch: (${createPendingWatch.toString()}),
  importModule: (specifier) => import(specifier),
};
(${denoGuestMain.toString()})(parts, Deno.args[0]);
})()
//# sourceURL=<cordon>`;
  const text = `(0, eval)(${JSON.stringify(script)});\n`;
  const dir = privateTempDir("cordon-deno-bootstrap");
  const main = join(dir, `${createHash("sha256").update(text).digest("hex").slice(0, 32)}.js`);
  if (!existsSync(main)) {
    mkdirSync(dir, { recursive: true });
    // Written aside and renamed: another process starting Deno never reads half a file.
    const partial = `${main}.${process.pid}.tmp`;
    writeFileSync(partial, text);
    renameSync(partial, main);
  }
  shared = { main };
  return shared;
}

export function guestConfig(memoryMb: number, streams: { input: string; output: string }): DenoGuestConfig {
  return {
    input: streams.input,
    output: streams.output,
    maxTimers: MAX_PENDING_TIMERS,
    maxTimerMs: MAX_TIMER_MS,
    maxPendingCalls: MAX_PENDING_HOST_CALLS,
    pendingArgsFactor: PENDING_ARGS_FACTOR,
    memoryBytes: memoryMb * 1024 * 1024,
    nodeBuiltins: PRELOADED_NODE_BUILTINS,
    textFields: [...TEXT_FIELDS],
  };
}

/** The deno binary the `deno` npm package installed (its own copy, or the platform package's). */
export function denoBinary(): string | undefined {
  const require = createRequire(import.meta.url);
  const candidates: string[] = [];
  try {
    candidates.push(join(dirname(require.resolve("deno/package.json")), process.platform === "win32" ? "deno.exe" : "deno"));
  } catch {}
  const arch = process.arch === "arm64" ? "arm64" : "x64";
  for (const target of [`linux-${arch}-glibc`, `darwin-${arch}`, `win32-${arch}`]) {
    try {
      candidates.push(
        join(dirname(require.resolve(`@deno/${target}/package.json`)), target.startsWith("win32") ? "deno.exe" : "deno"),
      );
    } catch {}
  }
  for (const candidate of candidates) {
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {}
  }
  return undefined;
}
