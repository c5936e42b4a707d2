// biome-ignore-all lint/complexity/noArguments: WebIDL counts the arguments actually passed (f(undefined) differs from f()), and rest parameters would change each method's length.

/**
 * Fetch API data types for the guest realm: Headers, Request and Response, plus the wire form the
 * value codec uses to move them across the host boundary as plain data.
 *
 * SELF-CONTAINED, like installWebApis: the engine injects `installFetchTypes.toString()` into the
 * isolate AFTER installWebApis, so the body references nothing outside itself (the types below are
 * erased) and captures every builtin and web API it uses at install time, before guest code runs.
 *
 * Bodies are fully buffered (there are no streams in the guest): a body is kept as bytes and the
 * body methods resolve from them. `body` is NOT a ReadableStream: it is null or a fresh Uint8Array
 * copy of the bytes. Not implemented: blob(), formData(), and the Request members that only
 * matter to a browser (referrer, integrity, ...); mode, credentials and cache are reported and
 * validated as Node does, but fetch does not read them. redirect crosses with the Request and the
 * host's fetch honours it.
 */

import type { WebApiHooks } from "./web-apis.js";

export type WireHeaders = [string, string][];
export interface WireRequest {
  $: "Q";
  m: string;
  u: string;
  h: WireHeaders;
  b: Uint8Array | null;
  /** The request's redirect mode, absent for "follow" (the default, and a wire that predates it). */
  r?: "error" | "manual";
  /**
   * The host's parse of `u` (host-services.ts parseUrl), sent where the host knows its parser:
   * kept, so the URL does not cross to be parsed again. Ignored by the decoders that parse on their own.
   */
  p?: string;
}
export interface WireResponse {
  $: "R";
  s: number;
  t: string;
  /** The response's URL ("" for one made in a realm, not fetched) and whether a redirect led to it. */
  u?: string;
  r?: boolean;
  h: WireHeaders;
  b: Uint8Array | null;
}
/** The codec's refusal of the value being encoded, at its path (CodecExtension's `refuse`). */
type Refuse = (reason: string) => never;
export interface WireHeadersTag {
  $: "H";
  h: WireHeaders;
}
export interface FetchWire {
  /** If value is one of THIS realm's Headers/Request/Response instances (brand check via the private fields), return its wire form (body bytes copied, bodyUsed NOT changed); else undefined. A Request/Response whose body was already used -> throw TypeError. */
  toWire(value: unknown, refuse: Refuse): WireRequest | WireResponse | WireHeadersTag | undefined;
  /** A value starts to cross: the header entries counted for it start over. */
  beginWire(): void;
  /** The header entries and messages counted in the crossing so far (CodecExtension's `mark`), and back to them. */
  markWire(): number[];
  rewindWire(mark: number[]): void;
  /** Build a Headers/Request/Response of this realm from its wire form; anything malformed -> TypeError. */
  fromWire(wire: WireRequest | WireResponse | WireHeadersTag): unknown;
  /**
   * Called once abort.ts has installed AbortController, before any guest code: makes the signal
   * of a Request given none (read only when asked for; it never aborts).
   */
  signals(makeSignal: () => unknown): void;
  /** A Response fetch resolves to: its headers become immutable, as a fetched one's are (a Response made or decoded otherwise keeps mutable ones). */
  fetched(value: unknown): unknown;
  /** The bytes of a Request's body (0 without one, or for anything else): fetch refuses one past its cap before it crosses. */
  bodyLength(value: unknown): number;
}

/** A header as stored: lowercase name, normalized value. Pairs are never mutated once stored. */
type Pair = [name: string, value: string];

interface BodyState {
  /** Null for "no body"; otherwise bytes owned by this state (never exposed, never mutated). */
  bytes: Uint8Array | null;
  used: boolean;
}

interface Extracted {
  bytes: Uint8Array;
  type: string | null;
}

export function installFetchTypes(g: typeof globalThis, hooks: WebApiHooks): FetchWire {
  // ---------------------------------------------------------------- captured builtins
  const call = Function.prototype.call;
  const uncurry = <T, A extends unknown[], R>(fn: (this: T, ...args: A) => R) =>
    call.bind(fn) as unknown as (self: T, ...args: A) => R;
  const getOwnDesc = Reflect.getOwnPropertyDescriptor;
  const getter = (proto: object, key: PropertyKey) => uncurry(getOwnDesc(proto, key)?.get as (this: unknown) => unknown);

  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const U8 = Uint8Array;
  const defineProperty = Object.defineProperty;
  const objectCreate = Object.create;
  const getPrototypeOf = Object.getPrototypeOf;
  const setPrototypeOf = Object.setPrototypeOf;
  const ownKeys = Reflect.ownKeys;
  const deleteProperty = Reflect.deleteProperty;
  const apply = Reflect.apply;
  const isArray = Array.isArray;
  const isView = ArrayBuffer.isView;
  const jsonParse = JSON.parse;
  const jsonStringify = JSON.stringify;
  const isFiniteNumber = Number.isFinite;
  const trunc = Math.trunc;
  const SymbolIterator: typeof Symbol.iterator = Symbol.iterator;
  const SymbolToStringTag: typeof Symbol.toStringTag = Symbol.toStringTag;
  const IteratorProto = getPrototypeOf(getPrototypeOf([][SymbolIterator]())) as object;

  const charCodeAt = uncurry(String.prototype.charCodeAt);
  const strSlice = uncurry(String.prototype.slice);
  const toLowerCase = uncurry(String.prototype.toLowerCase);
  const toUpperCase = uncurry(String.prototype.toUpperCase);
  const push = uncurry(Array.prototype.push);
  const join = uncurry(Array.prototype.join);
  const sort = uncurry(Array.prototype.sort);

  const TypedArrayProto = getPrototypeOf(U8.prototype) as Uint8Array;
  const taTag = getter(TypedArrayProto, SymbolToStringTag) as (v: unknown) => string | undefined;
  const taByteLength = getter(TypedArrayProto, "byteLength") as (v: ArrayBufferView) => number;
  const taByteOffset = getter(TypedArrayProto, "byteOffset") as (v: ArrayBufferView) => number;
  const taBuffer = getter(TypedArrayProto, "buffer") as (v: ArrayBufferView) => ArrayBuffer;
  const taSet = uncurry(TypedArrayProto.set) as (target: Uint8Array, source: ArrayLike<number>) => void;
  const dvBuffer = getter(DataView.prototype, "buffer") as (v: unknown) => ArrayBuffer;
  const dvByteOffset = getter(DataView.prototype, "byteOffset") as (v: unknown) => number;
  const dvByteLength = getter(DataView.prototype, "byteLength") as (v: unknown) => number;
  const abByteLength = getter(ArrayBuffer.prototype, "byteLength") as (v: unknown) => number;

  // The web APIs installed just before this (installWebApis).
  const URLCtor = g.URL;
  const urlHref = getter(URLCtor.prototype, "href") as (u: URL) => string;
  const urlUsername = getter(URLCtor.prototype, "username") as (u: URL) => string;
  const urlPassword = getter(URLCtor.prototype, "password") as (u: URL) => string;
  const paramsToString = uncurry(g.URLSearchParams.prototype.toString) as (p: unknown) => string;
  const encoder = new g.TextEncoder();
  const encode = uncurry(g.TextEncoder.prototype.encode) as (self: object, s: string) => Uint8Array;
  const decoder = new g.TextDecoder(); // UTF-8, replacement on errors, strips a leading BOM
  const decode = uncurry(g.TextDecoder.prototype.decode) as (self: object, b: Uint8Array) => string;

  /** Passed as the first constructor argument to build an instance from an internal state record. */
  const INTERNAL = objectCreate(null) as object;

  // ---------------------------------------------------------------- small helpers
  // Descriptors are built on null-prototype objects so a patched Object.prototype cannot add `get`/`set`.
  function defineValue(obj: object, key: PropertyKey, value: unknown, writable = true): void {
    const d = objectCreate(null) as PropertyDescriptor;
    d.value = value;
    d.writable = writable;
    d.enumerable = false;
    d.configurable = true;
    defineProperty(obj, key, d);
  }

  function typeError(message: string): TypeError {
    return new TypeErrorCtor(message);
  }

  function requireArgs(given: number, needed: number, what: string): void {
    if (given < needed) {
      throw typeError(`${what} requires at least ${needed} argument${needed > 1 ? "s" : ""}, but only ${given} present`);
    }
  }

  function isObject(v: unknown): v is object {
    return (typeof v === "object" && v !== null) || typeof v === "function";
  }

  /** A WebIDL dictionary argument: null/undefined read as empty (null here), other primitives refused. */
  function dictionary(v: unknown, what: string): Record<string, unknown> | null {
    if (v === undefined || v === null) return null;
    if (!isObject(v)) throw typeError(`${what}: init must be an object`);
    return v as Record<string, unknown>;
  }

  /** WebIDL ByteString: ToString, refusing code units above 0xFF. */
  function toByteString(v: unknown, what: string): string {
    const s = `${v}`; // a template literal (unlike String()) throws for symbols, as WebIDL requires
    for (let i = 0; i < s.length; i++) {
      if (charCodeAt(s, i) > 0xff) throw typeError(`${what}: cannot convert "${s}" to a ByteString`);
    }
    return s;
  }

  /** WebIDL unsigned short (no [EnforceRange]): ToNumber, truncate, modulo 2^16. */
  function toUnsignedShort(v: unknown): number {
    const n = +(v as number); // unary plus throws for symbols and bigints, as ToNumber does
    if (!isFiniteNumber(n)) return 0;
    const x = trunc(n) % 65536;
    return x < 0 ? x + 65536 : x;
  }

  // RFC 9110 tchar, as a lookup table over ASCII.
  const TCHAR = new U8(128);
  const tchars = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  for (let i = 0; i < tchars.length; i++) TCHAR[charCodeAt(tchars, i)] = 1;

  /** RFC 9110 token: 1*tchar. */
  function isToken(s: string): boolean {
    if (s.length === 0) return false;
    for (let i = 0; i < s.length; i++) {
      const c = charCodeAt(s, i);
      if (c > 0x7f || TCHAR[c] === 0) return false;
    }
    return true;
  }

  /** A header name as stored: a valid token, lowercased. */
  function headerName(v: unknown, what: string): string {
    const s = toByteString(v, what);
    if (!isToken(s)) throw typeError(`${what}: "${s}" is an invalid header name`);
    return toLowerCase(s);
  }

  function isHttpWhitespace(c: number): boolean {
    return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
  }

  /** A header value: leading and trailing HTTP whitespace stripped; NUL, CR and LF refused. */
  function headerValue(v: unknown, what: string): string {
    const raw = toByteString(v, what);
    let start = 0;
    let end = raw.length;
    while (start < end && isHttpWhitespace(charCodeAt(raw, start))) start++;
    while (end > start && isHttpWhitespace(charCodeAt(raw, end - 1))) end--;
    const s = strSlice(raw, start, end);
    for (let i = 0; i < s.length; i++) {
      const c = charCodeAt(s, i);
      if (c === 0 || c === 0x0a || c === 0x0d) throw typeError(`${what}: "${s}" is an invalid header value`);
    }
    return s;
  }

  /** RFC 9110 reason-phrase: *( HTAB / SP / VCHAR / obs-text ). */
  function isReasonPhrase(s: string): boolean {
    for (let i = 0; i < s.length; i++) {
      const c = charCodeAt(s, i);
      if ((c < 0x20 && c !== 0x09) || c === 0x7f || c > 0xff) return false;
    }
    return true;
  }

  function isNullBodyStatus(status: number): boolean {
    return status === 101 || status === 204 || status === 205 || status === 304;
  }

  /** Fetch's method normalization: CONNECT/TRACE/TRACK refused; only the six standard methods are uppercased. */
  function normalizeMethod(v: unknown): string {
    const m = toByteString(v, "Request");
    if (!isToken(m)) throw typeError(`'${m}' is not a valid HTTP method`);
    switch (toLowerCase(m)) {
      case "connect":
      case "trace":
      case "track":
        throw typeError(`'${m}' HTTP method is unsupported`);
      case "delete":
      case "get":
      case "head":
      case "options":
      case "post":
      case "put":
        return toUpperCase(m);
      default:
        return m; // PATCH included: the Fetch standard deliberately leaves it as given
    }
  }

  /** There is no document base URL in the guest: relative URLs are refused. */
  function parseUrl(s: string): URL {
    try {
      return new URLCtor(s);
    } catch {
      throw typeError(`Failed to parse URL from ${s}`);
    }
  }

  function requestUrl(s: string): string {
    const u = parseUrl(s);
    if (urlUsername(u) !== "" || urlPassword(u) !== "") {
      throw typeError(`Request cannot be constructed from a URL that includes credentials: ${s}`);
    }
    return urlHref(u);
  }

  function copyBytes(src: ArrayBufferView): Uint8Array {
    const out = new U8(taByteLength(src));
    taSet(out, src as Uint8Array);
    return out;
  }

  /** A copy of the bytes of an ArrayBuffer or ArrayBufferView, or undefined for anything else. */
  function bufferBytes(v: object): Uint8Array | undefined {
    if (isView(v)) {
      if (taTag(v) !== undefined) return copyBytes(new U8(taBuffer(v), taByteOffset(v), taByteLength(v)));
      return copyBytes(new U8(dvBuffer(v), dvByteOffset(v), dvByteLength(v)));
    }
    try {
      abByteLength(v); // brand check: throws unless v is an ArrayBuffer
    } catch {
      return undefined;
    }
    return copyBytes(new U8(v as ArrayBuffer));
  }

  /** Fetch's "extract a body": bytes plus the Content-Type it implies. Other values are stringified (WebIDL union). */
  function extractBody(body: unknown): Extracted {
    if (isObject(body)) {
      const bytes = bufferBytes(body);
      if (bytes !== undefined) return { bytes, type: null };
      let form: string | undefined;
      try {
        form = paramsToString(body); // brand check: throws unless body is a URLSearchParams
      } catch {}
      if (form !== undefined) return { bytes: encode(encoder, form), type: "application/x-www-form-urlencoded;charset=UTF-8" };
    }
    return { bytes: encode(encoder, `${body}`), type: "text/plain;charset=UTF-8" };
  }

  /** Reading a body: refused once used; a null body reads as empty and is never marked used. */
  function takeBytes(state: BodyState): Uint8Array {
    if (state.used) throw typeError("Body is unusable: Body has already been read");
    if (state.bytes === null) return new U8(0);
    state.used = true;
    return copyBytes(state.bytes);
  }

  /** Fetch's "sort and combine": lowercase names in order, values joined with ", " except set-cookie. */
  function sortAndCombine(list: Pair[]): Pair[] {
    const sorted: Pair[] = [];
    for (let i = 0; i < list.length; i++) push(sorted, list[i]);
    // Array.prototype.sort is stable, so values of one name keep their list order.
    sort(sorted, (a: Pair, b: Pair) => (a[0] === b[0] ? 0 : a[0] < b[0] ? -1 : 1));
    const out: Pair[] = [];
    for (let i = 0; i < sorted.length; i++) {
      const name = sorted[i][0];
      const last = out.length > 0 ? out[out.length - 1] : null;
      if (last !== null && last[0] === name && name !== "set-cookie") out[out.length - 1] = [name, `${last[1]}, ${sorted[i][1]}`];
      else push(out, sorted[i]);
    }
    return out;
  }

  // ---------------------------------------------------------------- Headers
  let isHeaders: (v: object) => v is Headers;
  let listOf: (h: Headers) => Pair[];
  let makeHeaders: (list: Pair[], immutable: boolean) => Headers;
  let copyHeaders: (h: Headers, immutable?: boolean) => Headers;
  let sortedOf: (h: Headers) => Pair[];
  let addHeaderIfAbsent: (h: Headers, name: string, value: string) => void;

  class Headers {
    #list: Pair[] = [];
    #immutable = false;
    #sorted: Pair[] | null = null; // cache of sortAndCombine(#list), dropped on every mutation

    static {
      isHeaders = (v): v is Headers => #list in v;
      listOf = (h) => h.#list;
      makeHeaders = (list, immutable) => {
        const h = new Headers();
        h.#list = list;
        h.#immutable = immutable;
        return h;
      };
      copyHeaders = (h, immutable = h.#immutable) => {
        const list: Pair[] = [];
        for (let i = 0; i < h.#list.length; i++) push(list, h.#list[i]);
        return makeHeaders(list, immutable);
      };
      sortedOf = (h) => {
        if (h.#sorted === null) h.#sorted = sortAndCombine(h.#list);
        return h.#sorted;
      };
      addHeaderIfAbsent = (h, name, value) => {
        for (let i = 0; i < h.#list.length; i++) if (h.#list[i][0] === name) return;
        h.#add(name, value);
      };
    }

    constructor(init: unknown = undefined) {
      if (init !== undefined) this.#fill(init);
    }

    #fill(init: unknown): void {
      if (!isObject(init)) throw typeError("Headers: init must be a sequence of [name, value] pairs or a record");
      if (#list in init) {
        // Another Headers: copy its list as is (iterating it would merge duplicates).
        const list = (init as Headers).#list;
        for (let i = 0; i < list.length; i++) this.#add(list[i][0], list[i][1]);
        return;
      }
      if ((init as Iterable<unknown>)[SymbolIterator] != null) {
        for (const item of init as Iterable<unknown>) {
          if (!isObject(item)) throw typeError("Headers: each header must be a [name, value] pair");
          const pair: unknown[] = [];
          for (const part of item as Iterable<unknown>) push(pair, part);
          if (pair.length !== 2) throw typeError(`Headers: expected name/value pair to be length 2, found ${pair.length}`);
          this.#add(headerName(pair[0], "Headers"), headerValue(pair[1], "Headers"));
        }
        return;
      }
      const keys = ownKeys(init);
      for (let i = 0; i < keys.length; i++) {
        const desc = getOwnDesc(init, keys[i]);
        if (desc === undefined || !desc.enumerable) continue;
        const name = headerName(keys[i], "Headers");
        this.#add(name, headerValue((init as Record<PropertyKey, unknown>)[keys[i]], "Headers"));
      }
    }

    #mutate(): void {
      if (this.#immutable) throw typeError("immutable");
      this.#sorted = null;
    }

    #add(name: string, value: string): void {
      this.#mutate();
      push(this.#list, [name, value]);
    }

    #values(name: string): string[] {
      const out: string[] = [];
      for (let i = 0; i < this.#list.length; i++) if (this.#list[i][0] === name) push(out, this.#list[i][1]);
      return out;
    }

    append(name: unknown, value: unknown): void {
      requireArgs(arguments.length, 2, "Headers.append");
      this.#add(headerName(name, "Headers.append"), headerValue(value, "Headers.append"));
    }

    delete(name: unknown): void {
      requireArgs(arguments.length, 1, "Headers.delete");
      const n = headerName(name, "Headers.delete");
      this.#mutate();
      const kept: Pair[] = [];
      for (let i = 0; i < this.#list.length; i++) if (this.#list[i][0] !== n) push(kept, this.#list[i]);
      this.#list = kept;
    }

    get(name: unknown): string | null {
      requireArgs(arguments.length, 1, "Headers.get");
      const values = this.#values(headerName(name, "Headers.get"));
      return values.length === 0 ? null : join(values, ", ");
    }

    has(name: unknown): boolean {
      requireArgs(arguments.length, 1, "Headers.has");
      return this.#values(headerName(name, "Headers.has")).length > 0;
    }

    set(name: unknown, value: unknown): void {
      requireArgs(arguments.length, 2, "Headers.set");
      const n = headerName(name, "Headers.set");
      const v = headerValue(value, "Headers.set");
      this.#mutate();
      // The first header of that name takes the value in place; the others go.
      const out: Pair[] = [];
      let found = false;
      for (let i = 0; i < this.#list.length; i++) {
        if (this.#list[i][0] !== n) push(out, this.#list[i]);
        else if (!found) {
          found = true;
          push(out, [n, v]);
        }
      }
      if (!found) push(out, [n, v]);
      this.#list = out;
    }

    getSetCookie(): string[] {
      return this.#values("set-cookie");
    }

    keys(): HeadersIterator {
      return new HeadersIterator(this, 0);
    }

    values(): HeadersIterator {
      return new HeadersIterator(this, 1);
    }

    entries(): HeadersIterator {
      return new HeadersIterator(this, 2);
    }

    forEach(callback: unknown, thisArg: unknown = undefined): void {
      requireArgs(arguments.length, 1, "Headers.forEach");
      if (typeof callback !== "function") throw typeError('The "callback" argument must be of type function');
      // Live: re-reads the sorted list each step, so the callback may mutate the headers.
      for (let i = 0; i < sortedOf(this).length; i++) {
        const pair = sortedOf(this)[i];
        apply(callback, thisArg, [pair[1], pair[0], this]);
      }
    }
  }

  /** Live iterator over a Headers' sorted-and-combined list: kind 0 = keys, 1 = values, 2 = entries. */
  class HeadersIterator {
    #headers: Headers;
    #kind: number;
    #index = 0;

    constructor(headers: Headers, kind: number) {
      this.#headers = headers;
      this.#kind = kind;
    }

    next(): IteratorResult<string | Pair, undefined> {
      const pairs = sortedOf(this.#headers);
      if (this.#index >= pairs.length) return { value: undefined, done: true };
      const pair = pairs[this.#index++];
      const kind = this.#kind;
      return { value: kind === 0 ? pair[0] : kind === 1 ? pair[1] : [pair[0], pair[1]], done: false };
    }
  }
  setPrototypeOf(HeadersIterator.prototype, IteratorProto);
  deleteProperty(HeadersIterator.prototype, "constructor");
  defineValue(HeadersIterator.prototype, SymbolToStringTag, "Headers Iterator", false);

  // ---------------------------------------------------------------- Request
  interface RequestState extends BodyState {
    method: string;
    url: string;
    headers: Headers;
    /** init's `signal`, else the input Request's; undefined: none given (the getter makes one). */
    signal: unknown;
    /** Reported and validated as Node does; of these cordon's fetch reads redirect only (see the README). */
    options: RequestOptions;
  }
  interface RequestOptions {
    cache: string;
    credentials: string;
    mode: string;
    redirect: string;
  }
  const DEFAULT_OPTIONS: RequestOptions = { cache: "default", credentials: "same-origin", mode: "cors", redirect: "follow" };
  // The RequestInit enums' values (WebIDL: anything else is a TypeError).
  const OPTION_VALUES: Record<keyof RequestOptions, string[]> = {
    cache: ["default", "no-store", "reload", "no-cache", "force-cache", "only-if-cached"],
    credentials: ["omit", "same-origin", "include"],
    mode: ["same-origin", "no-cors", "cors", "navigate"],
    redirect: ["follow", "error", "manual"],
  };
  function requestOption(value: unknown, key: keyof RequestOptions, fallback: string): string {
    if (value === undefined) return fallback;
    const text = `${value}`;
    const allowed = OPTION_VALUES[key];
    for (let i = 0; i < allowed.length; i++) if (allowed[i] === text) return text;
    throw typeError(`Request: '${text}' is not a valid value for init.${key}`);
  }
  let isRequest: (v: object) => boolean;
  let makeSignal: (() => unknown) | undefined;
  let requestState: (v: unknown) => RequestState;

  class Request {
    #s: RequestState;

    static {
      isRequest = (v) => #s in v;
      requestState = (v) => (v as Request).#s; // throws TypeError unless v is a Request
    }

    constructor(input: unknown, init: unknown = undefined) {
      requireArgs(arguments.length, 1, "Request");
      if (input === INTERNAL) {
        this.#s = init as RequestState;
        return;
      }
      const src = isObject(input) && #s in input ? (input as Request).#s : null;
      const url = src === null ? requestUrl(`${input}`) : src.url;
      const o = dictionary(init, "Request");
      // Dictionary members are read once each, in lexicographic order.
      const initBody = o === null ? undefined : o.body;
      const initCache = o === null ? undefined : o.cache;
      const initCredentials = o === null ? undefined : o.credentials;
      const initHeaders = o === null ? undefined : o.headers;
      const initMethod = o === null ? undefined : o.method;
      const initMode = o === null ? undefined : o.mode;
      const initRedirect = o === null ? undefined : o.redirect;
      const initSignal = o === null ? undefined : o.signal;
      const from = src === null ? DEFAULT_OPTIONS : src.options;
      const options: RequestOptions = {
        cache: requestOption(initCache, "cache", from.cache),
        credentials: requestOption(initCredentials, "credentials", from.credentials),
        mode: requestOption(initMode, "mode", from.mode),
        redirect: requestOption(initRedirect, "redirect", from.redirect),
      };
      if (options.mode === "navigate") throw typeError("Request: init.mode cannot be 'navigate'");
      if (options.cache === "only-if-cached" && options.mode !== "same-origin")
        throw typeError("Request: init.cache 'only-if-cached' requires init.mode 'same-origin'");
      // A signal given here, or the input Request's, is what fetch(request) listens to.
      if (initSignal !== undefined && initSignal !== null && !isObject(initSignal))
        throw typeError("Request: init.signal must be an AbortSignal");
      const signal = initSignal !== undefined ? (initSignal ?? undefined) : src === null ? undefined : src.signal;
      const method = initMethod !== undefined ? normalizeMethod(initMethod) : src === null ? "GET" : src.method;
      let headers: Headers;
      if (initHeaders !== undefined) headers = new Headers(initHeaders);
      else headers = src === null ? new Headers() : copyHeaders(src.headers, false);
      const inputBytes = src === null ? null : src.bytes;
      if ((initBody != null || inputBytes !== null) && (method === "GET" || method === "HEAD")) {
        throw typeError("Request with GET/HEAD method cannot have body");
      }
      let bytes: Uint8Array | null = null;
      if (initBody != null) {
        const body = extractBody(initBody);
        bytes = body.bytes;
        if (body.type !== null) addHeaderIfAbsent(headers, "content-type", body.type);
      } else if (src !== null && inputBytes !== null) {
        // The new request takes over the input's body, which counts as used from now on.
        if (src.used) throw typeError("Cannot construct a Request with a Request object that has already been used");
        bytes = inputBytes;
        src.used = true;
      }
      this.#s = { method, url, headers, bytes, used: false, signal, options };
    }

    get cache(): string {
      return this.#s.options.cache;
    }

    get credentials(): string {
      return this.#s.options.credentials;
    }

    get mode(): string {
      return this.#s.options.mode;
    }

    get redirect(): string {
      return this.#s.options.redirect;
    }

    get method(): string {
      return this.#s.method;
    }

    get url(): string {
      return this.#s.url;
    }

    get headers(): Headers {
      return this.#s.headers;
    }

    get signal(): unknown {
      const s = this.#s;
      if (s.signal === undefined && makeSignal !== undefined) s.signal = makeSignal();
      return s.signal ?? null;
    }

    clone(): Request {
      const s = this.#s;
      if (s.used) throw typeError("Request.clone: Body has already been consumed");
      return new Request(INTERNAL, {
        method: s.method,
        url: s.url,
        headers: copyHeaders(s.headers),
        bytes: s.bytes,
        used: false,
        signal: s.signal,
        options: s.options,
      });
    }
  }

  // ---------------------------------------------------------------- Response
  interface ResponseState extends BodyState {
    status: number;
    statusText: string;
    headers: Headers;
    type: string;
    /** Where a fetched response came from; "" and false for one made here. */
    url: string;
    redirected: boolean;
  }
  let isResponse: (v: object) => boolean;
  let responseState: (v: unknown) => ResponseState;

  /** Fetch's "initialize a response" for the constructor and Response.json. */
  function initResponse(body: Extracted | null, init: unknown): ResponseState {
    const o = dictionary(init, "Response");
    const initHeaders = o === null ? undefined : o.headers;
    const initStatus = o === null ? undefined : o.status;
    const initStatusText = o === null ? undefined : o.statusText;
    const status = initStatus === undefined ? 200 : toUnsignedShort(initStatus);
    const statusText = initStatusText === undefined ? "" : toByteString(initStatusText, "Response");
    if (status < 200 || status > 599) throw new RangeErrorCtor(`init["status"] must be in the range of 200 to 599, inclusive`);
    if (!isReasonPhrase(statusText)) throw typeError("Invalid statusText");
    const headers = initHeaders === undefined ? new Headers() : new Headers(initHeaders);
    if (body !== null) {
      if (isNullBodyStatus(status)) throw typeError(`Response with null body status ${status} cannot have a body`);
      if (body.type !== null) addHeaderIfAbsent(headers, "content-type", body.type);
    }
    return {
      status,
      statusText,
      headers,
      type: "default",
      url: "",
      redirected: false,
      bytes: body === null ? null : body.bytes,
      used: false,
    };
  }

  function errorResponse(): Response {
    return new Response(INTERNAL, {
      status: 0,
      statusText: "",
      headers: makeHeaders([], true),
      type: "error",
      url: "",
      redirected: false,
      bytes: null,
      used: false,
    });
  }

  class Response {
    #s: ResponseState;

    static {
      isResponse = (v) => #s in v;
      responseState = (v) => (v as Response).#s; // throws TypeError unless v is a Response
    }

    constructor(body: unknown = null, init: unknown = undefined) {
      if (body === INTERNAL) {
        this.#s = init as ResponseState;
        return;
      }
      this.#s = initResponse(body === null || body === undefined ? null : extractBody(body), init);
    }

    static error(): Response {
      return errorResponse();
    }

    static json(data: unknown, init: unknown = undefined): Response {
      requireArgs(arguments.length, 1, "Response.json");
      const text = jsonStringify(data) as string | undefined;
      if (text === undefined) throw typeError("Value is not JSON serializable");
      return new Response(INTERNAL, initResponse({ bytes: encode(encoder, text), type: "application/json" }, init));
    }

    static redirect(url: unknown, status: unknown = 302): Response {
      requireArgs(arguments.length, 1, "Response.redirect");
      const location = urlHref(parseUrl(`${url}`));
      const code = toUnsignedShort(status);
      if (code !== 301 && code !== 302 && code !== 303 && code !== 307 && code !== 308) {
        throw new RangeErrorCtor(`Invalid status code ${code}`);
      }
      const headers = makeHeaders([["location", location]], true);
      return new Response(INTERNAL, {
        status: code,
        statusText: "",
        headers,
        type: "default",
        url: "",
        redirected: false,
        bytes: null,
        used: false,
      });
    }

    get type(): string {
      return this.#s.type;
    }

    get url(): string {
      return this.#s.url;
    }

    get redirected(): boolean {
      return this.#s.redirected;
    }

    get status(): number {
      return this.#s.status;
    }

    get ok(): boolean {
      return this.#s.status >= 200 && this.#s.status <= 299;
    }

    get statusText(): string {
      return this.#s.statusText;
    }

    get headers(): Headers {
      return this.#s.headers;
    }

    clone(): Response {
      const s = this.#s;
      if (s.used) throw typeError("Response.clone: Body has already been consumed");
      const headers = copyHeaders(s.headers);
      return new Response(INTERNAL, {
        status: s.status,
        statusText: s.statusText,
        headers,
        type: s.type,
        url: s.url,
        redirected: s.redirected,
        bytes: s.bytes,
        used: false,
      });
    }
  }

  // ---------------------------------------------------------------- Body mixin
  /** Adds body, bodyUsed and the body methods; each class gets its own functions, brand-checked by stateOf. */
  function installBody(proto: object, stateOf: (self: unknown) => BodyState): void {
    // Async methods turn every throw (including a failed brand check) into a rejected promise.
    const members = {
      get body(): Uint8Array | null {
        const s = stateOf(this);
        return s.bytes === null ? null : copyBytes(s.bytes);
      },
      get bodyUsed(): boolean {
        return stateOf(this).used;
      },
      async arrayBuffer(): Promise<ArrayBuffer> {
        return taBuffer(takeBytes(stateOf(this)));
      },
      async bytes(): Promise<Uint8Array> {
        return takeBytes(stateOf(this));
      },
      async json(): Promise<unknown> {
        return jsonParse(decode(decoder, takeBytes(stateOf(this))));
      },
      async text(): Promise<string> {
        return decode(decoder, takeBytes(stateOf(this)));
      },
    };
    const keys = ownKeys(members);
    for (let i = 0; i < keys.length; i++) {
      const desc = getOwnDesc(members, keys[i]) as PropertyDescriptor;
      desc.enumerable = false;
      defineProperty(proto, keys[i], desc);
    }
  }
  installBody(Request.prototype, requestState);
  installBody(Response.prototype, responseState);

  // ---------------------------------------------------------------- wire
  function malformed(what: string): TypeError {
    return typeError(`Malformed fetch wire value: ${what}`);
  }

  /** The most header entries one crossing value holds (the host's decoder refuses more: fetch-wire.ts, MAX_HEADERS). */
  const MAX_WIRE_HEADERS = 10_000;
  /** The most Requests, Responses and Headers one crossing value holds (fetch-wire.ts, MAX_MESSAGES). */
  const MAX_WIRE_MESSAGES = 1_000;
  /** Header entries and messages put on the wire in the crossing under way (reset by the codec: `begin`, see fetch-wire.ts). */
  let wiredHeaders = 0;
  let wiredMessages = 0;

  function wireHeaders(h: Headers, refuse: Refuse): WireHeaders {
    const list = listOf(h);
    wiredHeaders += list.length;
    // Joined with +: a template literal calls the guest's String.prototype.concat in QuickJS.
    if (wiredHeaders > MAX_WIRE_HEADERS)
      refuse("brings the header entries of one crossing to " + wiredHeaders + "; at most " + MAX_WIRE_HEADERS + " cross at once");
    // Without a prototype: push (or an index write) meets an index setter a guest put on
    // Array.prototype, which swallowed the pairs (the codec then read the getter's value).
    const out = setPrototypeOf([], null) as WireHeaders;
    for (let i = 0; i < list.length; i++) out[i] = [list[i][0], list[i][1]];
    return out;
  }

  function wireBody(s: BodyState): Uint8Array | null {
    if (s.used) throw typeError("Body is unusable: Body has already been read");
    return s.bytes === null ? null : copyBytes(s.bytes);
  }

  function toWire(value: unknown, refuse: Refuse): WireRequest | WireResponse | WireHeadersTag | undefined {
    if (!isObject(value)) return undefined;
    const kind = isHeaders(value) ? "H" : isRequest(value) ? "Q" : isResponse(value) ? "R" : undefined;
    if (kind === undefined) return undefined;
    if (++wiredMessages > MAX_WIRE_MESSAGES)
      refuse(
        "brings the Requests, Responses and Headers of one crossing to " +
          wiredMessages +
          "; at most " +
          MAX_WIRE_MESSAGES +
          " cross at once",
      );
    if (kind === "H") return { $: "H", h: wireHeaders(value as Headers, refuse) };
    if (kind === "Q") {
      const s = requestState(value as Request);
      const b = wireBody(s);
      const r = s.options.redirect;
      // Literals only: assigning `r` afterwards would run a setter guest code put on Object.prototype.
      return r === "error" || r === "manual"
        ? { $: "Q", m: s.method, u: s.url, h: wireHeaders(s.headers, refuse), b, r }
        : { $: "Q", m: s.method, u: s.url, h: wireHeaders(s.headers, refuse), b };
    }
    const s = responseState(value as Response);
    const b = wireBody(s);
    return { $: "R", s: s.status, t: s.statusText, u: s.url, r: s.redirected, h: wireHeaders(s.headers, refuse), b };
  }

  function fromWire(wire: unknown): unknown {
    if (!isObject(wire)) throw malformed("not an object");
    const w = wire as Record<string, unknown>;
    const tag = w.$;
    if (tag !== "H" && tag !== "Q" && tag !== "R") throw malformed("unknown tag");
    const h = w.h;
    if (!isArray(h)) throw malformed("headers");
    const list: Pair[] = [];
    for (let i = 0; i < h.length; i++) {
      const p = h[i] as unknown;
      if (!isArray(p) || p.length !== 2 || typeof p[0] !== "string" || typeof p[1] !== "string") throw malformed("header");
      push(list, [headerName(p[0], "Headers"), headerValue(p[1], "Headers")]);
    }
    const headers = makeHeaders(list, false);
    if (tag === "H") return headers;
    const b = w.b;
    if (b !== null && taTag(b) !== "Uint8Array") throw malformed("body");
    let bytes = b === null ? null : copyBytes(b as Uint8Array);
    if (tag === "Q") {
      const m = w.m;
      const u = w.u;
      if (typeof m !== "string" || typeof u !== "string") throw malformed("request");
      const method = normalizeMethod(m);
      const p = w.p;
      if (typeof p === "string") hooks.primeUrl(u, p);
      const url = requestUrl(u);
      if (bytes !== null && (method === "GET" || method === "HEAD"))
        throw typeError("Request with GET/HEAD method cannot have body");
      const r = w.r;
      if (r !== undefined && r !== "error" && r !== "manual") throw malformed("redirect");
      const options = r === undefined ? DEFAULT_OPTIONS : { ...DEFAULT_OPTIONS, redirect: r };
      return new Request(INTERNAL, { method, url, headers, bytes, used: false, signal: undefined, options });
    }
    const s = w.s;
    const t = w.t;
    // Absent from a wire that predates them (a remote executor of another version): not fetched.
    const u = w.u === undefined ? "" : w.u;
    const r = w.r === undefined ? false : w.r;
    if (typeof s !== "number" || typeof t !== "string" || typeof u !== "string" || typeof r !== "boolean")
      throw malformed("response");
    if (s === 0) return errorResponse();
    if (!(s >= 200 && s <= 599) || trunc(s) !== s) throw malformed(`status ${s}`);
    toByteString(t, "Response");
    if (!isReasonPhrase(t)) throw typeError("Invalid statusText");
    if (bytes !== null && isNullBodyStatus(s)) {
      // An empty body for a null-body status (what a host fetch reports) is read as no body.
      if (taByteLength(bytes) > 0) throw typeError(`Response with null body status ${s} cannot have a body`);
      bytes = null;
    }
    const url = u === "" ? "" : urlHref(parseUrl(u));
    // A fetched response (it has a URL) is "basic", as Node's and Deno's fetch report; a constructed one "default".
    const type = url === "" ? "default" : "basic";
    return new Response(INTERNAL, { status: s, statusText: t, headers, type, url, redirected: r, bytes, used: false });
  }

  // ---------------------------------------------------------------- install
  // WebIDL shape: prototype members and static operations are enumerable; prototypes carry a Symbol.toStringTag.
  function webIdlClass(ctor: { prototype: object }, tag: string): void {
    const targets: object[] = [ctor.prototype, ctor];
    for (let t = 0; t < 2; t++) {
      const keys = ownKeys(targets[t]);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        const desc = getOwnDesc(targets[t], key);
        if (desc === undefined || key === "constructor" || key === "prototype" || key === "length" || key === "name") continue;
        desc.enumerable = true;
        defineProperty(targets[t], key, desc);
      }
    }
    defineValue(ctor.prototype, SymbolToStringTag, tag, false);
  }
  webIdlClass(Headers, "Headers");
  webIdlClass(Request, "Request");
  webIdlClass(Response, "Response");
  // Iterating a Headers yields its entries (same function object, as in WebIDL).
  defineValue(Headers.prototype, SymbolIterator, Headers.prototype.entries);

  defineValue(g, "Headers", Headers);
  defineValue(g, "Request", Request);
  defineValue(g, "Response", Response);

  return {
    toWire,
    beginWire() {
      wiredHeaders = 0;
      wiredMessages = 0;
    },
    // A literal (own elements, no setter a guest put on Array.prototype), read back by index.
    markWire: () => [wiredHeaders, wiredMessages],
    rewindWire(mark) {
      wiredHeaders = mark[0];
      wiredMessages = mark[1];
    },
    fromWire: fromWire as FetchWire["fromWire"],
    signals(make) {
      if (makeSignal === undefined) makeSignal = make;
    },
    fetched(value) {
      if (isObject(value) && isResponse(value)) {
        const s = responseState(value);
        s.headers = copyHeaders(s.headers, true);
      }
      return value;
    },
    bodyLength(value) {
      if (!isObject(value) || !isRequest(value)) return 0;
      const bytes = requestState(value).bytes;
      return bytes === null ? 0 : taByteLength(bytes);
    },
  };
}
