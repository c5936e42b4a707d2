import { inject } from "vitest";
import type { EngineName, HostName, SandboxOptions } from "../../src/index.js";

/**
 * Every engine × host combination that exists. The conformance, escape and exhaustion suites run
 * against each one; a new engine or host joins by adding one line here.
 */
export interface Combination {
  name: string;
  engine: Exclude<EngineName, "auto">;
  host: Exclude<HostName, "auto">;
  options: SandboxOptions;
}

export const COMBINATIONS: Combination[] = [
  { name: "v8/inprocess", engine: "v8", host: "inprocess", options: { engine: "v8", host: "inprocess" } },
  { name: "quickjs/inprocess", engine: "quickjs", host: "inprocess", options: { engine: "quickjs", host: "inprocess" } },
  { name: "v8/process", engine: "v8", host: "process", options: { engine: "v8", host: "process" } },
  { name: "quickjs/process", engine: "quickjs", host: "process", options: { engine: "quickjs", host: "process" } },
  { name: "v8/remote", engine: "v8", host: "remote", options: { engine: "v8", host: "remote", remote: remote() } },
  { name: "quickjs/remote", engine: "quickjs", host: "remote", options: { engine: "quickjs", host: "remote", remote: remote() } },
  { name: "deno/inprocess", engine: "deno", host: "inprocess", options: { engine: "deno", host: "inprocess" } },
];

/** The executor that test/remote-executor.setup.ts started for this run. */
function remote(): SandboxOptions["remote"] {
  return { url: inject("executorUrl"), secret: inject("executorSecret") };
}

/**
 * Behaviours an engine cannot provide, with the reason. The suites assert the documented
 * difference instead of skipping: `differs(combo, key)` names the entry.
 */
export const DIFFERENCES: Record<string, Partial<Record<Combination["name"], string>>> = {
  "class-members": {
    "deno/inprocess":
      "Deno's own Request and Response (the guest's, not cordon's) have a `textStream()` method Node's lack; no other member differs.",
  },
  "abort-message": {
    "deno/inprocess":
      "Deno's own AbortSignal is the guest's: a default abort reason is a DOMException named AbortError (code 20), as in Node, but its message reads \"The signal has been aborted\" where Node's reads \"This operation was aborted\". TimeoutError's is the same in both.",
  },
  "fetched-headers": {
    "deno/inprocess":
      "The guest's fetch answers with a Response built in the guest from what the host fetched (`new Response`), and Deno keeps a Response's header guard internal: a fetched Response's headers stay mutable.",
  },
  "request-body-cap": {
    "deno/inprocess":
      "A Request's body is a stream in Deno's realm, its size known only once it is read as the host call is encoded: a body past maxBridgeCallBytes is refused there, as a host call's arguments past it are (RangeError, ERR_BRIDGE_PAYLOAD_TOO_LARGE), and one between the egress's cap and that by the egress (ERR_CAPABILITY_DENIED, request-too-large). The v8 and QuickJS realms buffer bodies and refuse both the egress's way before crossing.",
  },
  "uncompiled-import": {
    "deno/inprocess":
      "Deno loads a run's modules from files cordon writes before the run: every source import is compiled then, so one esbuild refuses fails the run with ERR_COMPILE even when nothing imports it. The v8 and QuickJS engines refuse it only where a module imports it.",
  },
  "engine-syntax-error": {
    "deno/inprocess":
      "Deno loads a guest module itself, by import: a syntax its parser refuses that esbuild passed (decorators) rejects that import as the module's top-level throws do, and cordon cannot tell the two apart there, so the run fails with ERR_USER_CODE (a SyntaxError) where the v8 and QuickJS engines, which evaluate a script form that only makes its function, report ERR_COMPILE.",
  },
  "unhandled-rejection": {
    "quickjs/inprocess":
      "quickjs-emscripten does not expose QuickJS's promise rejection tracker (promiseRejectionHandler is unimplemented in its API), so a rejection nobody handles cannot be seen: the run completes with its value. An exception thrown in a timer callback still fails the run.",
  },
  "module-throw-object": {
    "v8/inprocess":
      'An object that is no Error, thrown by a module-form module\'s top level (one with imports or top-level await) or rejecting a promise nothing handled, reaches the host only through isolated-vm, which copies primitives and Errors and replaces any other object with a text of its own: no guest code can catch such a throw to report it first. cordon says so ("Uncaught object (not an Error: …)"); its contents are lost, whatever the form of the run (the rejection of a call that nothing handles too). What a script-form module, a call or a timer throws is named as the other engines name it.',
  },
  "clone-transfer": {
    "v8/inprocess":
      "structuredClone's `transfer` detaches the buffers it moves, and the V8 of Node 20 (isolated-vm's) has no ArrayBuffer.prototype.transfer, nor any other way for guest code to detach a buffer: a transfer list is refused with a DataCloneError that says so, and the buffer stays whole. A clone without `transfer` copies, as everywhere.",
  },
  "prepare-stack-trace": {
    "quickjs/inprocess":
      "Error.prepareStackTrace and CallSite objects are V8 APIs. QuickJS has neither: a stack is a string, so no CallSite can hand out a function or a receiver, and the hook is never called.",
  },
  "client-budget": {
    "v8/remote":
      "On the remote host, warm instances live on the executor, under the executor's own memoryBudgetMb (set where `cordon serve` runs); a client's memoryBudgetMb cannot resize a budget it shares with every other client. stats report the executor's budget and idle heap.",
    "quickjs/remote":
      "On the remote host, warm instances live on the executor, under the executor's own memoryBudgetMb (set where `cordon serve` runs); a client's memoryBudgetMb cannot resize a budget it shares with every other client. stats report the executor's budget and idle heap.",
  },
  "dynamic-import": {
    "quickjs/inprocess":
      "QuickJS serves import() from the same loader as static imports, which knows only the modules passed in `imports`; every other specifier rejects, the guest module's own filename and cordon's internal names (the engine's tagged module names too) included. V8 under isolated-vm rejects every import().",
    "deno/inprocess":
      "Deno's own loader serves import(): Node builtins (`node:fs`, and bare `fs`, `module`) and data: URLs load; files outside the function's private directory are refused by Deno's read permission, remote hosts by its import permission, and unknown schemes and names reject. Specifiers computed at run time are not rewritten, so a bare name given in `imports` (`db`) rejects.",
  },
  "node-builtins": {
    "deno/inprocess":
      "Deno provides Node's builtins, so `node:fs` (and a bare `fs`, rewritten to `node:fs`) load. What they could reach is refused by Deno's permissions instead: files outside the private directory, processes, sockets, the environment, system information and FFI each throw a catchable NotCapable error (test/engines/deno.test.ts).",
  },
  "deno-namespace": {
    "deno/inprocess":
      "The `Deno` namespace exists (its permission-gated operations throw NotCapable; `Deno.serve` only records the handler) and, in a module that imports something (loaded from a file), `import.meta` is Deno's: url, main, filename, dirname and resolve, naming the module's path in the function's private temporary directory. A module without imports runs in its script form, where `import.meta` is empty, as on the other engines.",
  },
  "stream-bodies": {
    "deno/inprocess":
      "Deno's Request and Response are its own, with streamed bodies, read (asynchronously) before they cross only where cordon reads them: a call's arguments, a run's input or a returned value, at most 2 levels inside. Elsewhere (deeper, in a Map, in an export or an error's fields) one made in the guest cannot cross: an export is skipped, a value is refused naming the rule. The other engines' guest classes hold their bodies as bytes, so theirs cross from anywhere, as a Request or Response decoded from the wire does everywhere.",
  },
  "replaced-builtins-bodies": {
    "deno/inprocess":
      "Deno's Request, Response and Headers are its own, and cordon reads their headers and bodies (core/fetch-wire.ts) with the builtins of the guest's realm: a guest that replaces Array.prototype.push, the array iterator or Function.prototype.call/apply, or puts an index accessor on Array.prototype, before returning one may not get it across (it varies from run to run): ERR_USER_CODE (its value cannot be read), ERR_INSTANCE_RESET (Deno's own code failed and its process exited) or ERR_CPU_TIMEOUT (reading the body spun until the CPU limit, with call/apply replaced). Never another value, nor another code.",
  },
  "url-limits": {
    "deno/inprocess":
      "Deno's guest has Deno's own URL, which parses in the Deno process, not on the host: cordon's URL limits (1 MiB once percent-encoded, 4096 bytes for a host that needs IDNA) do not apply there, and what a parse costs is the Deno process's time, under the run's limits.",
  },
  "finalizers-never-run": {
    "quickjs/inprocess":
      "quickjs-emscripten's QuickJS has FinalizationRegistry but ran no cleanup callback in these tests (50 registrations of objects nothing referenced, over 8 calls and ~1 s of timers): what a cleanup may do there is moot. cordon's wrapper (a cleanup runs as a leftover) is installed on every engine all the same.",
  },
  "answers-taken-by-worker": {
    "v8/process":
      "The guest's engine runs in a worker process that reads its pipe whatever the guest does: a host-call answer is delivered once the worker has read it, so a guest that takes none holds them in its worker, whose memory the RSS watchdog bounds. What the host holds is still under the run's maxBridgeCallBytes plus one answer (a stopped worker: test/conformance/answers-in-flight.test.ts).",
    "quickjs/process":
      "The guest's engine runs in a worker process that reads its pipe whatever the guest does: a host-call answer is delivered once the worker has read it, so a guest that takes none holds them in its worker, whose memory the RSS watchdog bounds. What the host holds is still under the run's maxBridgeCallBytes plus one answer (a stopped worker: test/conformance/answers-in-flight.test.ts).",
    "v8/remote":
      "The executor runs the guest on its own host (the process host by default): the executor reads a callback's answer as soon as its worker has read the ones before, so a guest that takes none holds them in the executor's worker. The application answering the callbacks holds an answer until its response is sent (with cordon's callback server, or `RpcEnv` passed to `handle`).",
    "quickjs/remote":
      "The executor runs the guest on its own host (the process host by default): the executor reads a callback's answer as soon as its worker has read the ones before, so a guest that takes none holds them in the executor's worker. The application answering the callbacks holds an answer until its response is sent (with cordon's callback server, or `RpcEnv` passed to `handle`).",
  },
  "callsite-files": {
    "deno/inprocess":
      "Guest modules are files in the function's private temporary directory, so a CallSite's getFileName() is that path (and an eval origin may name its file: URL); Deno's own web APIs (URL, structuredClone) are `ext:` modules; the runtime is an eval'd script, so its frames have no file name and the eval origin `<cordon>`. Error stacks that reach the caller are still renamed to the guest's own names (`<guest>`, the `imports` specifier).",
  },
};

/** Differences belong to the engine: every host of that engine shares them. */
export function differs(combo: Combination, key: string): string | undefined {
  return DIFFERENCES[key]?.[combo.name] ?? DIFFERENCES[key]?.[`${combo.engine}/inprocess`];
}
