import { codecSource } from "../../core/codec.js";
import {
  BRIDGE_BYTES_PER_BODY_BYTE,
  COPY_CHARS_PER_HEAP_BYTE,
  MAX_PENDING_HOST_CALLS,
  MAX_PENDING_TIMERS,
  MAX_TIMER_MS,
  PENDING_ARGS_FACTOR,
} from "../../core/limits.js";
import { installAbort } from "./abort.js";
import { installDOMException } from "./dom-exception.js";
import { installFetchTypes } from "./fetch-types.js";
import { createInspect } from "./inspect.js";
import { installRuntime } from "./runtime.js";
import { CHANNEL_LAYOUT, createServe } from "./serve.js";
import { MAX_URL_LENGTH } from "../host-services.js";
import { createStructuredClone } from "./structured-clone.js";
import { installWebApis } from "./web-apis.js";
import { budgetResizableBuffers } from "./resizable-budget.js";
import { createRandomPool } from "./random-pool.js";
import { createOutbox, OUTBOX_LAYOUT } from "./outbox.js";

/** The filename guest stack traces show for runtime frames; the host strips these frames. */
export const RUNTIME_FILENAME = "<cordon>";

/**
 * Names of the host callbacks the runtime script reads from the global object and deletes
 * before any guest code runs.
 */
export const HOST_CALLBACK_NAMES = {
  log: "__cordon_log",
  call: "__cordon_call",
  timer: "__cordon_timer",
  done: "__cordon_done",
  parseUrl: "__cordon_parse_url",
  setUrlPart: "__cordon_set_url_part",
  randomBytes: "__cordon_random_bytes",
  /** Not a callback: the outbox's shared memory (v8 only, outbox.ts). */
  outbox: "__cordon_outbox",
} as const;

/** Random bytes the guest realm draws from the host at a time (random-pool.ts). */
const RANDOM_BLOCK_BYTES = 4096;

/** Globals the runtime defines whose instances hold state no clone could copy. */
const PLATFORM_CLASSES = [
  "URL",
  "URLSearchParams",
  "TextEncoder",
  "TextDecoder",
  "Headers",
  "Request",
  "Response",
  "AbortController",
  "AbortSignal",
];

let cached: string | undefined;

/**
 * The script that turns a bare realm into a guest realm. It evaluates to the runtime's internals
 * (see GuestInternals). Every piece is a self-contained function, stringified, so the guest runs
 * exactly the code the host's tests exercise.
 */
export function guestRuntimeScript(): string {
  if (cached) return cached;
  const take = (name: string) => `take(${JSON.stringify(name)})`;
  const n = HOST_CALLBACK_NAMES;
  cached = `(function () {
"use strict";
const g = globalThis;
function take(name) { const value = g[name]; delete g[name]; return value; }
const atomics = g.Atomics;
// Log lines and timer changes go to the outbox where the engine gave one (v8), else they cross (outbox.ts).
const outbox = (${createOutbox.toString()})(atomics, ${JSON.stringify(OUTBOX_LAYOUT)}, ${take(n.outbox)});
const hostLog = ${take(n.log)}, hostTimer = ${take(n.timer)};
const host = {
  log: (level, message, index) => { if (!outbox.log(level, message, index)) hostLog(level, message, index); },
  timer: (id, ms) => { if (!outbox.timer(id, ms)) hostTimer(id, ms); },
  call: ${take(n.call)}, done: ${take(n.done)} };
const hostParseUrl = ${take(n.parseUrl)}, hostSetUrlPart = ${take(n.setUrlPart)}, randomBytes = ${take(n.randomBytes)};
// The v8 engine answers a long URL's parts inside a one-element array (HostText in runtime.ts).
const fromHost = (text) => (typeof text === "string" ? text : text[0]);
const parseUrl = (input, base) => fromHost(base === undefined ? hostParseUrl(input) : hostParseUrl(input, base));
const setUrlPart = (href, part, value) => fromHost(hostSetUrlPart(href, part, value));
const codec = (${codecSource()})();
const platformPrototypes = [];
const isPrototypeOf = Function.prototype.call.bind(Object.prototype.isPrototypeOf);
(${installDOMException.toString()})(g);
const clone = (${createStructuredClone.toString()})((value) => {
  for (let i = 0; i < platformPrototypes.length; i++) if (isPrototypeOf(platformPrototypes[i], value)) return true;
  return false;
});
const randomPool = (${createRandomPool.toString()})(randomBytes, ${RANDOM_BLOCK_BYTES});
const webApiHooks = (${installWebApis.toString()})(g, { parseUrl, setUrlPart, randomBytes: randomPool.take, clone, maxUrlLength: ${MAX_URL_LENGTH} });
const wire = (${installFetchTypes.toString()})(g, webApiHooks);
codec.extend({
  begin: () => wire.beginWire(),
  mark: () => wire.markWire(),
  rewind: (mark) => wire.rewindWire(mark),
  encode: (value, refuse) => wire.toWire(value, refuse),
  decode: (t, revive) => (t.$ === "Q" || t.$ === "R" || t.$ === "H")
    ? wire.fromWire({ $: t.$, m: t.m, u: t.u, s: t.s, t: t.t, r: t.r, p: t.p, h: revive(t.h, "h"), b: revive(t.b, "b") ?? null })
    : undefined,
});
const internals = (${installRuntime.toString()})(host, codec, (${createInspect.toString()})(), {
  maxTimers: ${MAX_PENDING_TIMERS}, maxTimerMs: ${MAX_TIMER_MS}, maxPendingCalls: ${MAX_PENDING_HOST_CALLS}, pendingArgsFactor: ${PENDING_ARGS_FACTOR},
  fetched: (response) => wire.fetched(response), bodyLength: (request) => wire.bodyLength(request),
  bridgeBytesPerBodyByte: ${BRIDGE_BYTES_PER_BODY_BYTE} });
internals.drainRandom = randomPool.drain;
internals.serve = (${createServe.toString()})(internals.call, internals, atomics, ${JSON.stringify(CHANNEL_LAYOUT)});
// Engines whose realm shares this process's memory (v8) set the copy limit, from the heap limit:
// resizable ArrayBuffers, which the heap limit does not count, get as many bytes in all.
{ const limitCopies = internals.limitCopies;
  internals.limitCopies = (chars) => { limitCopies(chars); (${budgetResizableBuffers.toString()})(g, chars / ${COPY_CHARS_PER_HEAP_BYTE}); }; }
(${installAbort.toString()})(g);
{ const Controller = g.AbortController; wire.signals(() => new Controller().signal); }
// The runtime's own classes, whose state lives in its closures: structuredClone refuses them, as browsers do.
for (const name of ${JSON.stringify(PLATFORM_CLASSES)}) if (typeof g[name] === "function") platformPrototypes[platformPrototypes.length] = g[name].prototype;
Object.defineProperty(g, "__cordon_entry", { value: internals.entry, writable: false, configurable: false, enumerable: false });
return internals;
})()`;
  return cached;
}
