import type { BrokeredFetch } from "../capabilities.js";
import type { AnswerGate, BodyReading } from "./answer-gate.js";
import { isValidGlobalName } from "../names.js";
import { createCodec } from "./codec.js";
import { readBodiesWithin } from "./body-reads.js";
import { hostFetchExtension, needsBodies } from "./fetch-wire.js";
import { describe } from "./limits.js";
import { MAX_CODE_LENGTH, checkModuleName } from "./options.js";
import type { HostBinding } from "./types.js";

/** How a binding appears to the guest runtime: a bridged function, data, or an object of these. */
export type BindingDesc = { f: number; n: string } | { d: string } | { o: Record<string, BindingDesc> };

interface BridgedFunction {
  fn: (...args: unknown[]) => unknown;
  owner: unknown;
  /** `globals.fetchUser` or `imports["db"].query`: used in error messages. */
  label: string;
}

/** What an engine needs of bindings: the descriptor, and a way to answer a bridge call. */
export interface BindingsLike {
  /** `{ globals, modules }` descriptors as JSON: what the guest runtime builds its functions from. */
  readonly text: string;
  /**
   * Answer a bridge call: run host function `fnId` with the encoded arguments. `signal` aborts
   * when the run or call that made it has ended: the brokered fetch stops its exchange then (a
   * host function of the caller's own runs to its end; its answer is dropped). An answer
   * longer than `maxBytes` (the run's maxBridgeCallBytes) is not sent: `tooLarge` says so.
   * `gate`, the run's answers on their way to its guest: an answer is encoded when it lets it,
   * and what it holds (`held`) the caller releases once the guest's engine has it.
   */
  dispatch(fnId: number, argsText: string, signal?: AbortSignal, maxBytes?: number, gate?: AnswerGate): Promise<BridgeAnswer>;
}

export interface BridgeAnswer {
  ok: boolean;
  text: string;
  /** The answer was longer than the caller's maxBytes: `text` is empty, the run ends with ERR_BRIDGE_PAYLOAD_TOO_LARGE. */
  tooLarge?: boolean;
  /** Characters this answer holds of the dispatch's gate: release them once it is delivered or dropped. */
  held?: number;
}

/** The answer for one longer than the caller's maxBytes. */
export const TOO_LARGE: BridgeAnswer = Object.freeze({ ok: false, text: "", tooLarge: true });

/**
 * The maxBytes another process sent with a host call (a worker, an executor): its word for its
 * own run's maxBridgeCallBytes, which bounds only that run's answer. Anything but a number is none.
 */
export function peerMaxBytes(value: unknown): number | undefined {
  return typeof value === "number" && value >= 0 ? value : undefined;
}

/**
 * Host bindings of one run (or one prefix): the descriptor the guest builds its functions from,
 * and the table the host dispatches bridge calls through. Guests only ever name a function by
 * its number in this table; they never hold a host object.
 */
export class Bindings implements BindingsLike {
  readonly functions: BridgedFunction[] = [];
  /** The brokered fetch's number in `functions`, if the guest has one: it alone is handed the call's signal. */
  readonly fetchId: number | undefined;
  readonly text: string;
  /** Which host function objects these bindings call: part of a prefix's warm-pool key. */
  readonly identity: string;

  /**
   * `fetch`, when given, is the run's brokered fetch (the egress with its rules): the guest gets
   * a `fetch` global that calls it. Without it the guest has no fetch at all.
   */
  constructor(
    globals: Record<string, HostBinding> = {},
    hostModules: Record<string, Record<string, HostBinding>> = {},
    fetch?: BrokeredFetch,
  ) {
    const codec = sharedCodec();
    const describeValue = (value: unknown, label: string, name: string, owner: unknown, depth: number): BindingDesc => {
      if (typeof value === "function") {
        this.functions.push({ fn: value as BridgedFunction["fn"], owner, label });
        return { f: this.functions.length - 1, n: name };
      }
      if (depth < 8 && value !== null && typeof value === "object" && hasFunctionLeaf(value, depth)) {
        const o: Record<string, BindingDesc> = Object.create(null);
        for (const key of Object.keys(value)) {
          o[key] = describeValue((value as Record<string, unknown>)[key], `${label}.${key}`, key, value, depth + 1);
        }
        return { o };
      }
      try {
        return { d: codec.encode(value, label, Number.POSITIVE_INFINITY, false) };
      } catch (error) {
        throw new TypeError(`cordon: ${(error as Error).message}`);
      }
    };
    // Null-prototype records: a key named "__proto__" is then an own entry like any other, not a
    // prototype assignment that drops it.
    const globalsDesc: Record<string, BindingDesc> = Object.create(null);
    for (const [name, value] of Object.entries(globals)) {
      if (!isValidGlobalName(name)) {
        throw new TypeError(
          `cordon: globals.${name} is not a valid global name (an identifier that shadows no builtin or runtime global)`,
        );
      }
      globalsDesc[name] = describeValue(value, `globals.${name}`, name, undefined, 0);
    }
    const modulesDesc: Record<string, BindingDesc> = Object.create(null);
    for (const [specifier, value] of Object.entries(hostModules)) {
      modulesDesc[specifier] = describeValue(value, `imports[${JSON.stringify(specifier)}]`, "default", undefined, 0);
    }
    // The fetch binding is made per run or prefix: the key of a warm pool names its rules instead.
    this.identity = this.functions.map((f) => functionId(f.fn)).join(",");
    if (fetch) {
      this.functions.push({ fn: fetch as BridgedFunction["fn"], owner: undefined, label: "fetch" });
      this.fetchId = this.functions.length - 1;
    }
    this.text = JSON.stringify({ globals: globalsDesc, modules: modulesDesc, fetch: this.fetchId });
  }

  get size(): number {
    return this.functions.length;
  }

  dispatch(fnId: number, argsText: string, signal?: AbortSignal, maxBytes?: number, gate?: AnswerGate): Promise<BridgeAnswer> {
    return dispatchBridgeCall(this, fnId, argsText, signal, maxBytes, gate);
  }
}

/** The descriptor of bindings with nothing in them: installing it on a fresh instance changes nothing. */
export const EMPTY_BINDINGS_TEXT = JSON.stringify({ globals: {}, modules: {} });

/** Bindings with nothing in them, shared (made at first use): they hold no state a run could change. */
let emptyBindings: Bindings | undefined;

/**
 * The bindings of a run or prefix: the shared empty ones when it binds nothing (most one-off
 * runs), since making a Bindings was ~30 µs of a paced one-off run's host time here.
 */
export function bindingsFor(
  globals: Record<string, HostBinding> | undefined,
  hostModules: Record<string, Record<string, HostBinding>>,
  fetch: BrokeredFetch | undefined,
): Bindings {
  const empty = fetch === undefined && (globals === undefined || isEmpty(globals)) && isEmpty(hostModules);
  if (!empty) return new Bindings(globals, hostModules, fetch);
  if (!emptyBindings) {
    emptyBindings = new Bindings();
    Object.freeze(emptyBindings.functions);
    Object.freeze(emptyBindings);
  }
  return emptyBindings;
}

/** No own enumerable string keys: what the constructor would bind from it (Object.entries) is nothing. */
function isEmpty(record: object): boolean {
  return Object.keys(record).length === 0;
}

const functionIds = new WeakMap<object, number>();
let nextFunctionId = 0;
function functionId(fn: object): number {
  let id = functionIds.get(fn);
  if (id === undefined) {
    id = ++nextFunctionId;
    functionIds.set(fn, id);
  }
  return id;
}

/**
 * The module source of each host module in a bindings descriptor: the runtime builds the object
 * (`__cordon_module`), the module exports it as default and each key that is an identifier name
 * by name. Reserved words are names too (`kv.delete`): each key is read into a local first and
 * exported under its name (`export { m1 as delete }`), which a destructuring cannot do. A module
 * of plain data (no functions) exports its keys as well.
 */
export function hostModuleSources(bindingsText: string): Record<string, string> {
  const modules = (JSON.parse(bindingsText) as { modules?: Record<string, BindingDesc> }).modules ?? {};
  const sources: Record<string, string> = Object.create(null);
  for (const [specifier, desc] of Object.entries(modules)) {
    const names = moduleKeys(desc).filter((k) => /^[A-Za-z_$][\w$]*$/.test(k) && k !== "default");
    const locals = names.map((name, i) => `const m${i} = m.${name};`).join("\n");
    const exported = names.length ? `\nexport { ${names.map((name, i) => `m${i} as ${name}`).join(", ")} };` : "";
    sources[specifier] = `const m = __cordon_module(${JSON.stringify(specifier)});\nexport default m;\n${locals}${exported}`;
  }
  return sources;
}

function moduleKeys(desc: BindingDesc): string[] {
  if ("o" in desc) return Object.keys(desc.o);
  if (!("d" in desc)) return [];
  const value = decodeUnweighed(desc.d);
  return value !== null && typeof value === "object" && !Array.isArray(value) ? Object.keys(value) : [];
}

/** The error for a specifier no import grants. */
export function moduleNotFound(specifier: string): string {
  return `Cannot find module ${JSON.stringify(specifier)}: a guest can import only the modules passed in \`imports\` (no node: builtins, files or packages)`;
}

function hasFunctionLeaf(value: object, depth: number): boolean {
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) {
    return Object.values(value).some((v) => typeof v === "function");
  }
  for (const v of Object.values(value)) {
    if (typeof v === "function") return true;
    if (depth < 8 && v !== null && typeof v === "object" && hasFunctionLeaf(v, depth + 1)) return true;
  }
  return false;
}

let codecInstance: ReturnType<typeof createCodec> | undefined;
/** The host's codec. Stateless, so one instance serves every run. */
export function sharedCodec(): ReturnType<typeof createCodec> {
  if (!codecInstance) {
    codecInstance = createCodec(true);
    codecInstance.extend(hostFetchExtension);
  }
  return codecInstance;
}

/**
 * Decode with the host's codec without weighing the text (codec-containers.ts weighs what a
 * guest sends): for the host's own texts, and for a guest's that was weighed already.
 */
export function decodeUnweighed(text: string, rootPath = "value"): unknown {
  return sharedCodec().decode(text, rootPath, Number.POSITIVE_INFINITY);
}

/** Check the shape of `imports` and split it into source modules and host modules. */
export function splitImports(imports: unknown): {
  sources: Record<string, string>;
  hostModules: Record<string, Record<string, HostBinding>>;
} {
  // Null-prototype: a module named "__proto__" is kept as an own entry (an assignment to a plain
  // object's "__proto__" would drop it, or replace the object's prototype).
  const sources: Record<string, string> = Object.create(null);
  const hostModules: Record<string, Record<string, HostBinding>> = Object.create(null);
  if (imports === undefined) return { sources, hostModules };
  if (imports === null || typeof imports !== "object" || Array.isArray(imports)) {
    throw new TypeError(`cordon: imports must be an object of specifier → source text or host module, got ${describe(imports)}`);
  }
  for (const [specifier, value] of Object.entries(imports)) {
    const where = `imports[${JSON.stringify(specifier.slice(0, 40))}]`;
    checkModuleName(specifier, where, 512);
    // Each source import is held to the cap `code` is (it was uncapped: 20 Mi characters ran).
    if (typeof value === "string") {
      if (value.length > MAX_CODE_LENGTH) throw new TypeError(`cordon: ${where} is longer than ${MAX_CODE_LENGTH} characters`);
      sources[specifier] = value;
    } else if (value !== null && typeof value === "object" && !Array.isArray(value))
      hostModules[specifier] = value as Record<string, HostBinding>;
    else
      throw new TypeError(
        `cordon: imports[${JSON.stringify(specifier)}] must be module source text or an object, got ${describe(value)}`,
      );
  }
  return { sources, hostModules };
}

/**
 * Answers this long are large: after one, the next host call's answer is encoded on a later turn
 * of the loop. A guest that awaited 40 calls of a host function returning one 8 MB string had all
 * 40 encoded and framed in one turn: the process host's loop was held 3.8 s (timers, pipes and
 * every other run waited). Now one large answer a turn; what waits meanwhile is the guest's.
 */
const LARGE_ANSWER_CHARS = 1024 * 1024;
/** Set from a large answer's encoding until the loop's next turn (checked and set with no await between). */
let largeAnswerTurn: Promise<void> | undefined;

function encodedLargeAnswer(): void {
  largeAnswerTurn ??= new Promise((resolve) =>
    setImmediate(() => {
      largeAnswerTurn = undefined;
      resolve();
    }),
  );
}

/**
 * Dispatch one bridge call on the host: decode the arguments, call the function, encode the
 * result. A host error reaches the guest with its name, message and own fields, never its stack.
 */
export async function dispatchBridgeCall(
  bindings: Bindings,
  fnId: number,
  argsText: string,
  signal?: AbortSignal,
  maxBytes = Number.POSITIVE_INFINITY,
  gate?: AnswerGate,
): Promise<BridgeAnswer> {
  const codec = sharedCodec();
  const target = bindings.functions[fnId];
  if (!target) return { ok: false, text: bridgeErrorText(new TypeError("unknown host function")) };
  let args: unknown;
  try {
    args = codec.decode(argsText, `${target.label}() arguments`);
  } catch (error) {
    // The codec's refusal names what is wrong and where (ERR_NOT_SERIALIZABLE, its path): the
    // guest sent that text. Anything else is the host's business, not the guest's.
    return { ok: false, text: bridgeErrorText(codec.refused(error) ? error : new TypeError("malformed arguments")) };
  }
  // The body of an answer (a Response returned, or fetched) counts in the gate as it is read.
  const reading = gate?.reading(signal);
  try {
    return await answerOf(target, fnId === bindings.fetchId, args, signal, maxBytes, gate, reading);
  } finally {
    // After its answer holds its encoded text (or it has none): the body's bytes count no more.
    reading?.end();
  }
}

async function answerOf(
  target: BridgedFunction,
  isFetch: boolean,
  args: unknown,
  signal: AbortSignal | undefined,
  maxBytes: number,
  gate: AnswerGate | undefined,
  reading: BodyReading | undefined,
): Promise<BridgeAnswer> {
  const codec = sharedCodec();
  let result: unknown;
  try {
    const list = Array.isArray(args) ? args : [];
    result = await (isFetch
      ? (target.fn as unknown as BrokeredFetch)(list[0] as Request, signal, reading)
      : target.fn.apply(target.owner, list));
  } catch (error) {
    return gated(gate, signal, () => errorAnswer(error, maxBytes), reading);
  }
  try {
    if (result !== null && typeof result === "object" && needsBodies([result])) {
      // Bounded like the answer: a Response body (an upstream's, say) that never ends is refused
      // once past maxBytes, and one that stalls is dropped when the call is over.
      const read = await readBodiesWithin([result], { maxBytes, signal, chunk: reading?.chunk });
      if (read === "too-large") return TOO_LARGE;
      if (read === "aborted") throw signal?.reason;
      if (typeof read === "object") throw read.failed;
    }
  } catch (error) {
    return gated(gate, signal, () => errorAnswer(error, maxBytes), reading);
  }
  return gated(
    gate,
    signal,
    () => {
      try {
        // Encoded within the caller's limit: an answer past it is refused here, not copied to the guest first.
        return { ok: true, text: codec.encode(result, `${target.label}() result`, maxBytes, false) };
      } catch (error) {
        if (codec.threw(error) && (error as { code?: unknown }).code === "ERR_OUTPUT_TOO_LARGE") return TOO_LARGE;
        return errorAnswer(error, maxBytes);
      }
    },
    reading,
  );
}

/**
 * Make an answer (`encode`: never throws) when it may be: on the loop's turn after a large
 * answer, and with room among the run's answers in flight (`gate`), which it then holds. One
 * whose body was counted as it was read waits as its body's next chunk would (BodyReading.encodable).
 */
async function gated(
  gate: AnswerGate | undefined,
  signal: AbortSignal | undefined,
  encode: () => BridgeAnswer,
  reading?: BodyReading,
): Promise<BridgeAnswer> {
  const counted = reading?.counted === true;
  const next = () => largeAnswerTurn ?? (counted ? reading?.encodable() : gate?.turn(signal));
  for (let turn = next(); turn; turn = next()) {
    await turn;
    if (signal?.aborted) break;
  }
  if (signal?.aborted) return { ok: false, text: bridgeErrorText(new Error("the host call was stopped")) };
  // Checked, encoded and held with no await between: the gate's check and hold are one step.
  const answer = encode();
  const chars = answer.text.length;
  if (chars >= LARGE_ANSWER_CHARS) encodedLargeAnswer();
  if (!gate || chars === 0) return answer;
  gate.hold(chars);
  // Not too large (its text would be empty): ok and text are all of it (no spread: decision 023).
  return { ok: answer.ok, text: answer.text, held: chars };
}

/** A host error as the guest's answer, or TOO_LARGE when its text is longer than `maxBytes`. */
function errorAnswer(error: unknown, maxBytes: number): BridgeAnswer {
  let text: string;
  try {
    text = bridgeErrorText(error);
  } catch {
    // A host function threw something reading throws from (a Proxy whose traps throw): this
    // rejection escaped, unhandled, and ended the host process (in-process host).
    text = bridgeErrorText(new Error(UNREADABLE_THROWN));
  }
  return text.length > maxBytes ? TOO_LARGE : { ok: false, text };
}

const UNREADABLE_THROWN =
  "the host function failed with a value cordon could not read (reading it threw: a getter or a Proxy trap)";

/** Encode a host error for the guest without stacks (host frames never reach the guest). */
export function bridgeErrorText(error: unknown): string {
  return sharedCodec().encodeError(error, false);
}
