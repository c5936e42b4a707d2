// biome-ignore-all lint/complexity/noArguments: WebIDL counts the arguments actually passed (f(undefined) differs from f()), and rest parameters would change each method's length.

/**
 * Web platform globals for the guest realm: URL, URLSearchParams, TextEncoder, TextDecoder,
 * atob/btoa, structuredClone and crypto.getRandomValues/randomUUID.
 *
 * SELF-CONTAINED: the engine injects `installWebApis.toString()` into a bare V8 isolate that has
 * only ECMAScript builtins, so the function body references nothing outside itself (the types
 * below are erased). Builtins are captured up front because guest code runs afterwards and may
 * patch prototypes; at run time the body avoids array iteration, destructuring of arrays and
 * prototype method lookups for the same reason.
 */

export interface WebApiDeps {
  /**
   * Parse a URL on the host (WHATWG). Returns its parts (host-services.ts: a JSON header of
   * lengths, a newline, the href), "" when invalid, or "!" and the reason a limit refused it.
   */
  parseUrl(input: string, base?: string): string;
  /** Set one component (e.g. "pathname", "search", "hash", "host", "hostname", "port", "protocol", "username", "password", "href") of href on the host; answers as parseUrl ("" also when the setter fails). */
  setUrlPart(href: string, part: string, value: string): string;
  /** The longest href the host parses (host-services.ts): longer text is refused without crossing whole. */
  maxUrlLength: number;
  /** n cryptographically random bytes from the host (n <= 65536). */
  randomBytes(n: number): Uint8Array;
  /** The structured clone algorithm (structured-clone.ts). */
  clone(value: unknown, options?: unknown): unknown;
}

/** The URL components with setters, in the order Node's URL lists them. */
type UrlPart = "href" | "protocol" | "username" | "password" | "host" | "hostname" | "port" | "pathname" | "search" | "hash";
/** A URL's components, as Node's URL getters return them. */
type UrlParts = Record<UrlPart | "origin", string>;
/** The header of a `parseUrl`/`setUrlPart` answer: the origin (blob: URLs only) and the lengths of protocol, username, password, hostname, port, pathname, search, hash. */
type UrlHead = [origin: string | null, ...lengths: number[]];

type Pair = [name: string, value: string];

/** WHATWG UTF-8 decoder state (code point so far, continuation bytes still expected, bounds of the next one). */
interface Utf8State {
  cp: number;
  remaining: number;
  lower: number;
  upper: number;
}

/** What the fetch types (installed after these) need of the web APIs. */
export interface WebApiHooks {
  /**
   * Keep the host's answer to parsing `input` (a Request's URL, sent with it: core/fetch-wire.ts),
   * so the Request's own parse, and the handler's `new URL(request.url)`, do not cross for it.
   */
  primeUrl(input: string, answer: string): void;
}

export function installWebApis(g: typeof globalThis, deps: WebApiDeps): WebApiHooks {
  // ---------------------------------------------------------------- captured builtins
  const call = Function.prototype.call;
  // `uncurry(String.prototype.slice)(s, 1)` behaves like `s.slice(1)` even if the prototype is patched later.
  const uncurry = <T, A extends unknown[], R>(fn: (this: T, ...args: A) => R) =>
    call.bind(fn) as unknown as (self: T, ...args: A) => R;
  const getOwnDesc = Reflect.getOwnPropertyDescriptor;
  const getter = (proto: object, key: PropertyKey) => uncurry(getOwnDesc(proto, key)?.get as (this: unknown) => unknown);
  const MapCtor = Map;
  const mapGet = uncurry(Map.prototype.get) as <K, V>(map: Map<K, V>, key: K) => V | undefined;
  const mapSet = uncurry(Map.prototype.set) as <K, V>(map: Map<K, V>, key: K, value: V) => Map<K, V>;
  const mapClear = uncurry(Map.prototype.clear) as (map: Map<unknown, unknown>) => void;
  const mapSize = getter(Map.prototype, "size") as (map: Map<unknown, unknown>) => number;

  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const captureStackTrace = Error.captureStackTrace;
  const U8 = Uint8Array;
  const U16 = Uint16Array;
  const defineProperty = Object.defineProperty;
  const objectCreate = Object.create;
  const getPrototypeOf = Object.getPrototypeOf;
  const setPrototypeOf = Object.setPrototypeOf;
  const ownKeys = Reflect.ownKeys;
  const deleteProperty = Reflect.deleteProperty;
  const apply = Reflect.apply;
  const jsonParse = JSON.parse;
  const fromCharCode = String.fromCharCode;
  const isView = ArrayBuffer.isView;
  const SymbolIterator: typeof Symbol.iterator = Symbol.iterator;
  const SymbolToStringTag: typeof Symbol.toStringTag = Symbol.toStringTag;
  const IteratorProto = getPrototypeOf(getPrototypeOf([][SymbolIterator]())) as object;

  // `using` declarations are lowered by esbuild (core/source.ts): its helpers find the disposal
  // methods under Symbol.dispose and Symbol.asyncDispose, which Node defines for itself and
  // neither Node 20's V8 nor QuickJS has. Defined as the well-known symbols are.
  for (const name of ["dispose", "asyncDispose"]) {
    if (typeof (Symbol as unknown as Record<string, unknown>)[name] !== "symbol")
      defineProperty(Symbol, name, { value: Symbol(`Symbol.${name}`), writable: false, enumerable: false, configurable: false });
  }

  const charCodeAt = uncurry(String.prototype.charCodeAt);
  const strSlice = uncurry(String.prototype.slice);
  const indexOf = uncurry(String.prototype.indexOf);
  const toLowerCase = uncurry(String.prototype.toLowerCase);
  const push = uncurry(Array.prototype.push);
  const join = uncurry(Array.prototype.join);
  const sort = uncurry(Array.prototype.sort);

  const TypedArrayProto = getPrototypeOf(U8.prototype) as Uint8Array;
  const taTag = getter(TypedArrayProto, SymbolToStringTag) as (v: unknown) => string | undefined;
  const taLength = getter(TypedArrayProto, "length") as (v: ArrayBufferView) => number;
  const taByteLength = getter(TypedArrayProto, "byteLength") as (v: ArrayBufferView) => number;
  const taByteOffset = getter(TypedArrayProto, "byteOffset") as (v: ArrayBufferView) => number;
  const taBuffer = getter(TypedArrayProto, "buffer") as (v: ArrayBufferView) => ArrayBuffer;
  const taSubarray = uncurry(TypedArrayProto.subarray) as <T extends Uint8Array | Uint16Array>(v: T, s: number, e: number) => T;
  const taSet = uncurry(TypedArrayProto.set) as (target: Uint8Array, source: ArrayLike<number>) => void;
  const dvBuffer = getter(DataView.prototype, "buffer") as (v: unknown) => ArrayBuffer;
  const dvByteOffset = getter(DataView.prototype, "byteOffset") as (v: unknown) => number;
  const dvByteLength = getter(DataView.prototype, "byteLength") as (v: unknown) => number;
  const abByteLength = getter(ArrayBuffer.prototype, "byteLength") as (v: unknown) => number;

  // ---------------------------------------------------------------- small helpers
  // Descriptors are built on null-prototype objects so a patched Object.prototype cannot add `get`/`set`.
  function defineValue(obj: object, key: PropertyKey, value: unknown, writable = true, enumerable = false): void {
    const d = objectCreate(null) as PropertyDescriptor;
    d.value = value;
    d.writable = writable;
    d.enumerable = enumerable;
    d.configurable = true;
    defineProperty(obj, key, d);
  }

  function typeError(message: string): TypeError {
    return new TypeErrorCtor(message);
  }

  // The realm's DOMException (dom-exception.ts), captured at install; without one (a realm of
  // the tests), an Error with the DOM name and code.
  const DOMExceptionCtor = (g as { DOMException?: new (message: string, name: string) => Error }).DOMException;
  function domError(name: string, code: number, message: string): Error {
    if (typeof DOMExceptionCtor === "function") return new DOMExceptionCtor(message, name);
    const e = new ErrorCtor(message);
    defineValue(e, "name", name);
    defineValue(e, "code", code);
    // Re-capture so the stack header shows the DOM name and starts at the caller.
    if (typeof captureStackTrace === "function") captureStackTrace(e, domError);
    return e;
  }

  function requireArgs(given: number, needed: number, what: string): void {
    if (given < needed) {
      throw typeError(`${what} requires at least ${needed} argument${needed > 1 ? "s" : ""}, but only ${given} present`);
    }
  }

  // String builder: collects UTF-16 code units in a reusable buffer and flushes them in chunks, so
  // large outputs never grow one string a character at a time. Not re-entrant: every user starts
  // with sbStart() and no guest code runs while a string is being built.
  const CHUNK = 8192;
  const sbBuf = new U16(CHUNK);
  let sbLen = 0;
  let sbParts: string[] = [];
  function sbStart(): void {
    sbLen = 0;
    sbParts = [];
  }
  function sbFlush(): void {
    push(sbParts, apply(fromCharCode, null, taSubarray(sbBuf, 0, sbLen)) as string);
    sbLen = 0;
  }
  function sbPut(unit: number): void {
    if (sbLen === CHUNK) sbFlush();
    sbBuf[sbLen++] = unit;
  }
  function sbEnd(): string {
    sbFlush();
    const parts = sbParts;
    sbParts = [];
    return parts.length === 1 ? parts[0] : join(parts, "");
  }

  /** The code point at i; a lone surrogate reads as U+FFFD. Callers advance by 2 when the result > 0xFFFF. */
  function codePointAt(s: string, i: number, len: number): number {
    const c = charCodeAt(s, i);
    if (c < 0xd800 || c > 0xdfff) return c;
    if (c <= 0xdbff && i + 1 < len) {
      const d = charCodeAt(s, i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) return 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
    }
    return 0xfffd;
  }

  /** WebIDL USVString conversion: ToString, then lone surrogates -> U+FFFD. */
  function toUSV(v: unknown): string {
    const s = `${v}`; // a template literal (unlike String()) throws for symbols, as WebIDL requires
    const len = s.length;
    let i = 0;
    while (i < len && (charCodeAt(s, i) & 0xf800) !== 0xd800) i++;
    if (i === len) return s;
    sbStart();
    for (let k = 0; k < len; k++) {
      const cp = codePointAt(s, k, len);
      if (cp > 0xffff) {
        sbPut(charCodeAt(s, k));
        sbPut(charCodeAt(s, ++k));
      } else sbPut(cp);
    }
    return sbEnd();
  }

  function isAsciiWhitespace(c: number): boolean {
    return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d;
  }

  // ---------------------------------------------------------------- UTF-8
  function utf8Length(s: string): number {
    const len = s.length;
    let n = 0;
    for (let i = 0; i < len; i++) {
      const c = charCodeAt(s, i);
      if (c < 0x80) n += 1;
      else if (c < 0x800) n += 2;
      else if (c <= 0xdbff && c >= 0xd800 && i + 1 < len && (charCodeAt(s, i + 1) & 0xfc00) === 0xdc00) {
        n += 4;
        i++;
      } else n += 3;
    }
    return n;
  }

  /** Writes as many whole code points as fit in dest[0, cap); returns bytes written, sets encodedRead. */
  let encodedRead = 0;
  function writeUtf8(s: string, dest: Uint8Array, cap: number): number {
    const len = s.length;
    let i = 0;
    let j = 0;
    while (i < len) {
      const cp = codePointAt(s, i, len);
      if (cp < 0x80) {
        if (j + 1 > cap) break;
        dest[j++] = cp;
      } else if (cp < 0x800) {
        if (j + 2 > cap) break;
        dest[j++] = 0xc0 | (cp >> 6);
        dest[j++] = 0x80 | (cp & 0x3f);
      } else if (cp < 0x10000) {
        if (j + 3 > cap) break;
        dest[j++] = 0xe0 | (cp >> 12);
        dest[j++] = 0x80 | ((cp >> 6) & 0x3f);
        dest[j++] = 0x80 | (cp & 0x3f);
      } else {
        if (j + 4 > cap) break;
        dest[j++] = 0xf0 | (cp >> 18);
        dest[j++] = 0x80 | ((cp >> 12) & 0x3f);
        dest[j++] = 0x80 | ((cp >> 6) & 0x3f);
        dest[j++] = 0x80 | (cp & 0x3f);
        i++;
      }
      i++;
    }
    encodedRead = i;
    return j;
  }

  function encodeUtf8(s: string): Uint8Array {
    const n = utf8Length(s);
    const out = new U8(n);
    writeUtf8(s, out, n);
    return out;
  }

  function newUtf8State(): Utf8State {
    return { cp: 0, remaining: 0, lower: 0x80, upper: 0xbf };
  }

  function decodeError(st: Utf8State): TypeError {
    // A fatal error also drops any sequence buffered by streaming.
    st.remaining = 0;
    st.lower = 0x80;
    st.upper = 0xbf;
    const e = typeError("The encoded data was not valid for encoding utf-8");
    defineValue(e, "code", "ERR_ENCODING_INVALID_ENCODED_DATA");
    return e;
  }

  /** The WHATWG UTF-8 decoder. `flush` ends the stream: an incomplete trailing sequence becomes an error. */
  function decodeUtf8(bytes: Uint8Array, st: Utf8State, fatal: boolean, flush: boolean): string {
    let { cp, remaining, lower, upper } = st;
    const len = taLength(bytes);
    sbStart();
    for (let i = 0; i < len; i++) {
      const b = bytes[i];
      if (remaining === 0) {
        // Lead byte. The bounds exclude overlong forms, surrogates (ED A0..BF) and code points > U+10FFFF.
        if (b < 0x80) sbPut(b);
        else if (b >= 0xc2 && b <= 0xdf) {
          remaining = 1;
          cp = b & 0x1f;
        } else if (b >= 0xe0 && b <= 0xef) {
          if (b === 0xe0) lower = 0xa0;
          else if (b === 0xed) upper = 0x9f;
          remaining = 2;
          cp = b & 0x0f;
        } else if (b >= 0xf0 && b <= 0xf4) {
          if (b === 0xf0) lower = 0x90;
          else if (b === 0xf4) upper = 0x8f;
          remaining = 3;
          cp = b & 0x07;
        } else {
          if (fatal) throw decodeError(st);
          sbPut(0xfffd);
        }
        continue;
      }
      if (b < lower || b > upper) {
        // Invalid continuation: one U+FFFD for the partial sequence, then re-read this byte as a lead.
        remaining = 0;
        lower = 0x80;
        upper = 0xbf;
        if (fatal) throw decodeError(st);
        sbPut(0xfffd);
        i--;
        continue;
      }
      lower = 0x80;
      upper = 0xbf;
      cp = (cp << 6) | (b & 0x3f);
      if (--remaining > 0) continue;
      if (cp > 0xffff) {
        sbPut(0xd800 + ((cp - 0x10000) >> 10));
        sbPut(0xdc00 + ((cp - 0x10000) & 0x3ff));
      } else sbPut(cp);
    }
    if (flush && remaining !== 0) {
      remaining = 0;
      lower = 0x80;
      upper = 0xbf;
      if (fatal) throw decodeError(st);
      sbPut(0xfffd);
    }
    st.cp = cp;
    st.remaining = remaining;
    st.lower = lower;
    st.upper = upper;
    return sbEnd();
  }

  // ---------------------------------------------------------------- application/x-www-form-urlencoded
  const HEX_UPPER = "0123456789ABCDEF";

  function hexValue(b: number): number {
    if (b >= 0x30 && b <= 0x39) return b - 0x30;
    const l = b | 0x20;
    return l >= 0x61 && l <= 0x66 ? l - 0x61 + 10 : -1;
  }

  function sbPutPercent(b: number): void {
    sbPut(0x25);
    sbPut(charCodeAt(HEX_UPPER, b >> 4));
    sbPut(charCodeAt(HEX_UPPER, b & 0x0f));
  }

  /** Form-urlencodes s into the builder: space -> "+", alphanumerics and *-._ kept, other UTF-8 bytes as %XX. */
  function sbPutForm(s: string): void {
    const bytes = encodeUtf8(s);
    const n = taLength(bytes);
    for (let i = 0; i < n; i++) {
      const b = bytes[i];
      const l = b | 0x20;
      if ((b >= 0x30 && b <= 0x39) || (l >= 0x61 && l <= 0x7a) || b === 0x2a || b === 0x2d || b === 0x2e || b === 0x5f) sbPut(b);
      else if (b === 0x20) sbPut(0x2b);
      else sbPutPercent(b);
    }
  }

  function serializeForm(list: Pair[]): string {
    sbStart();
    for (let i = 0; i < list.length; i++) {
      if (i > 0) sbPut(0x26);
      sbPutForm(list[i][0]);
      sbPut(0x3d);
      sbPutForm(list[i][1]);
    }
    return sbEnd();
  }

  /** "+" -> space, then percent-decode (malformed escapes stay literal), then UTF-8 decode. */
  function formDecode(s: string): string {
    const len = s.length;
    let i = 0;
    for (; i < len; i++) {
      const c = charCodeAt(s, i);
      if (c === 0x25 || c === 0x2b || (c & 0xf800) === 0xd800) break;
    }
    if (i === len) return s;
    const bytes = encodeUtf8(s);
    const n = taLength(bytes);
    let j = 0;
    for (let k = 0; k < n; k++) {
      let b = bytes[k];
      if (b === 0x2b) b = 0x20;
      else if (b === 0x25 && k + 2 < n) {
        const hi = hexValue(bytes[k + 1]);
        const lo = hexValue(bytes[k + 2]);
        if (hi >= 0 && lo >= 0) {
          b = (hi << 4) | lo;
          k += 2;
        }
      }
      bytes[j++] = b;
    }
    return decodeUtf8(taSubarray(bytes, 0, j), newUtf8State(), false, true);
  }

  function parseForm(input: string): Pair[] {
    const list: Pair[] = [];
    const len = input.length;
    let start = 0;
    while (start <= len) {
      let end = indexOf(input, "&", start);
      if (end < 0) end = len;
      if (end > start) {
        const seq = strSlice(input, start, end);
        const eq = indexOf(seq, "=");
        const name = eq < 0 ? seq : strSlice(seq, 0, eq);
        const value = eq < 0 ? "" : strSlice(seq, eq + 1);
        push(list, [formDecode(name), formDecode(value)]);
      }
      start = end + 1;
    }
    return list;
  }

  // ---------------------------------------------------------------- URLSearchParams
  // Bridges between the classes: private fields are class-scoped, so each class hands out the
  // few internal operations the other needs from a static block.
  let paramsList!: (p: URLSearchParams) => Pair[];
  let resetParams!: (p: URLSearchParams, query: string) => void;
  let attachParams!: (p: URLSearchParams, url: URL) => void;
  let setSearchFromParams!: (url: URL, serialized: string) => void;

  class URLSearchParams {
    #list: Pair[] = [];
    #url: URL | null = null;

    static {
      paramsList = (p) => p.#list;
      resetParams = (p, query) => {
        p.#list = parseForm(query);
      };
      attachParams = (p, url) => {
        p.#url = url;
      };
    }

    constructor(init: unknown = undefined) {
      if (init === undefined) return;
      if ((typeof init === "object" && init !== null) || typeof init === "function") {
        if (#list in init) {
          const src = init.#list;
          for (let i = 0; i < src.length; i++) push(this.#list, [src[i][0], src[i][1]]);
          return;
        }
        const method = (init as { [SymbolIterator]?: unknown })[SymbolIterator];
        if (method !== undefined && method !== null) {
          if (typeof method !== "function") throw typeError("Query pairs must be iterable");
          // Sequence of pairs; WebIDL iterates both levels with the iteration protocol.
          for (const pair of init as Iterable<unknown>) {
            if ((typeof pair !== "object" || pair === null) && typeof pair !== "function") {
              throw typeError("Each query pair must be an iterable [name, value] tuple");
            }
            const items: unknown[] = [];
            for (const item of pair as Iterable<unknown>) push(items, item);
            if (items.length !== 2) throw typeError("Each query pair must be an iterable [name, value] tuple");
            push(this.#list, [toUSV(items[0]), toUSV(items[1])]);
          }
          return;
        }
        // Record: own enumerable keys, in property order.
        const keys = ownKeys(init);
        for (let i = 0; i < keys.length; i++) {
          const desc = getOwnDesc(init, keys[i]);
          if (desc?.enumerable) {
            push(this.#list, [toUSV(keys[i]), toUSV((init as Record<PropertyKey, unknown>)[keys[i]])]);
          }
        }
        return;
      }
      const s = toUSV(init);
      this.#list = parseForm(charCodeAt(s, 0) === 0x3f ? strSlice(s, 1) : s);
    }

    get size(): number {
      return this.#list.length;
    }

    append(name: unknown, value: unknown): void {
      requireArgs(arguments.length, 2, "URLSearchParams.append");
      const list = this.#list;
      push(list, [toUSV(name), toUSV(value)]);
      try {
        this.#update();
      } catch (e) {
        list.length--;
        throw e;
      }
    }

    delete(name: unknown, value: unknown = undefined): void {
      requireArgs(arguments.length, 1, "URLSearchParams.delete");
      const n = toUSV(name);
      const v = value === undefined ? undefined : toUSV(value);
      const list = this.#list;
      const kept: Pair[] = [];
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] !== n || (v !== undefined && list[i][1] !== v)) push(kept, list[i]);
      }
      this.#commit(kept);
    }

    get(name: unknown): string | null {
      requireArgs(arguments.length, 1, "URLSearchParams.get");
      const n = toUSV(name);
      const list = this.#list;
      for (let i = 0; i < list.length; i++) if (list[i][0] === n) return list[i][1];
      return null;
    }

    getAll(name: unknown): string[] {
      requireArgs(arguments.length, 1, "URLSearchParams.getAll");
      const n = toUSV(name);
      const list = this.#list;
      const out: string[] = [];
      for (let i = 0; i < list.length; i++) if (list[i][0] === n) push(out, list[i][1]);
      return out;
    }

    has(name: unknown, value: unknown = undefined): boolean {
      requireArgs(arguments.length, 1, "URLSearchParams.has");
      const n = toUSV(name);
      const v = value === undefined ? undefined : toUSV(value);
      const list = this.#list;
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] === n && (v === undefined || list[i][1] === v)) return true;
      }
      return false;
    }

    set(name: unknown, value: unknown): void {
      requireArgs(arguments.length, 2, "URLSearchParams.set");
      const n = toUSV(name);
      const v = toUSV(value);
      const list = this.#list;
      const kept: Pair[] = [];
      let found = false;
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] !== n) push(kept, list[i]);
        else if (!found) {
          found = true;
          push(kept, [n, v]);
        }
      }
      if (!found) push(kept, [n, v]);
      this.#commit(kept);
    }

    sort(): void {
      // Array.prototype.sort is stable; `<` on strings compares UTF-16 code units, as the spec wants.
      sort(this.#list, (a: Pair, b: Pair) => (a[0] === b[0] ? 0 : a[0] < b[0] ? -1 : 1));
      this.#update();
    }

    forEach(callback: unknown, thisArg: unknown = undefined): void {
      requireArgs(arguments.length, 1, "URLSearchParams.forEach");
      if (typeof callback !== "function") throw typeError('The "callback" argument must be of type function');
      // Live: re-reads the list each step, so the callback may mutate it.
      for (let i = 0; i < this.#list.length; i++) {
        const pair = this.#list[i];
        apply(callback, thisArg, [pair[1], pair[0], this]);
      }
    }

    keys(): URLSearchParamsIterator {
      return new URLSearchParamsIterator(this, 0);
    }

    values(): URLSearchParamsIterator {
      return new URLSearchParamsIterator(this, 1);
    }

    entries(): URLSearchParamsIterator {
      return new URLSearchParamsIterator(this, 2);
    }

    toString(): string {
      return serializeForm(this.#list);
    }

    /**
     * The URL's query follows every mutation (the spec's "update steps"). It throws when the URL
     * would pass a limit of the host's; the callers then keep the list they had.
     */
    #update(): void {
      if (this.#url !== null) setSearchFromParams(this.#url, serializeForm(this.#list));
    }

    #commit(list: Pair[]): void {
      if (this.#url !== null) setSearchFromParams(this.#url, serializeForm(list));
      this.#list = list;
    }
  }

  /** Live iterator over a URLSearchParams: kind 0 = keys, 1 = values, 2 = entries. */
  class URLSearchParamsIterator {
    #params: URLSearchParams;
    #kind: number;
    #index = 0;

    constructor(params: URLSearchParams, kind: number) {
      this.#params = params;
      this.#kind = kind;
    }

    next(): IteratorResult<string | Pair, undefined> {
      const list = paramsList(this.#params);
      if (this.#index >= list.length) return { value: undefined, done: true };
      const pair = list[this.#index++];
      const kind = this.#kind;
      return { value: kind === 0 ? pair[0] : kind === 1 ? pair[1] : [pair[0], pair[1]], done: false };
    }
  }
  // Like %URLSearchParamsIteratorPrototype%: inherits %IteratorPrototype%, exposes no constructor.
  setPrototypeOf(URLSearchParamsIterator.prototype, IteratorProto);
  deleteProperty(URLSearchParamsIterator.prototype, "constructor");
  defineValue(URLSearchParamsIterator.prototype, SymbolToStringTag, "URLSearchParams Iterator", false);

  // ---------------------------------------------------------------- URL
  function invalidUrl(input: string, base: string | undefined, reason: string = input): TypeError {
    const e = typeError(`Invalid URL: ${reason}`);
    defineValue(e, "code", "ERR_INVALID_URL");
    defineValue(e, "input", input, true, true);
    if (base !== undefined) defineValue(e, "base", base, true, true);
    return e;
  }

  // The host's answers to recent parses, by input (and base). The host's parser is a pure
  // function of them, and the same URL is often parsed twice: a handler's `new URL(request.url)`
  // parses what the runtime parsed as the Request arrived. On v8 each parse is a crossing (~50 µs
  // of the run's CPU charge). Short URLs only, a few dozen: ~100 KB of the heap at most.
  const PARSE_CACHE_KEY_CHARS = 512;
  const PARSE_CACHE_ENTRIES = 64;
  const parseCache = new MapCtor<string, string>();

  // Text bound for the host is copied there first (on v8, by the host's own thread): past the
  // limit only its first maxUrlLength + 1 characters cross, which the host refuses for their size.
  const urlCap = deps.maxUrlLength + 1;
  function capped(text: string): string {
    return text.length > urlCap ? strSlice(text, 0, urlCap) : text;
  }
  function hostParse(input: string, base: string | undefined): string {
    // Never the same key for a parse with a base and one without.
    const key = base === undefined ? `u${input}` : `b${input.length}:${input}${base}`;
    const known = key.length <= PARSE_CACHE_KEY_CHARS ? mapGet(parseCache, key) : undefined;
    if (known !== undefined) return known;
    const answer = base === undefined ? deps.parseUrl(capped(input)) : deps.parseUrl(capped(input), capped(base));
    if (key.length <= PARSE_CACHE_KEY_CHARS) {
      if (mapSize(parseCache) >= PARSE_CACHE_ENTRIES) mapClear(parseCache);
      mapSet(parseCache, key, answer);
    }
    return answer;
  }
  function primeUrl(input: string, answer: string): void {
    const key = `u${input}`;
    if (key.length > PARSE_CACHE_KEY_CHARS || mapGet(parseCache, key) !== undefined) return;
    // Only an answer for this very input, already in its parsed form: its href (after the header
    // line) is the input itself. Anything else is left for a parse of its own.
    const newline = indexOf(answer, "\n");
    if (newline < 0 || strSlice(answer, newline + 1) !== input) return;
    if (mapSize(parseCache) >= PARSE_CACHE_ENTRIES) mapClear(parseCache);
    mapSet(parseCache, key, answer);
  }
  function hostSet(href: string, part: string, value: string): string {
    return deps.setUrlPart(href, part, capped(value));
  }

  /** A refusal by one of the host's limits ("!" and the reason). */
  function refused(answer: string): boolean {
    return charCodeAt(answer, 0) === 0x21;
  }

  /** new URL() and the href setter refuse a URL over a limit as an invalid one, naming the limit. */
  function urlLimitError(answer: string, input: string, base: string | undefined): TypeError {
    return invalidUrl(input, base, strSlice(answer, 1));
  }

  /** Schemes whose origin is scheme, host and port (Node's URL: every special scheme but file:). */
  function tupleOrigin(protocol: string): boolean {
    return protocol === "http:" || protocol === "https:" || protocol === "ws:" || protocol === "wss:" || protocol === "ftp:";
  }

  /**
   * The components from the host's answer: the href and each part's length, so a 1 MiB href
   * crosses once, not once per component. The parts follow one another in the href:
   * protocol, "//", username, ":" password, "@", hostname, ":" port, (a "/." before a path
   * when there is no host), pathname, search, hash. An empty query or fragment keeps its "?" or
   * "#" in the href (neither character ends any other part there).
   */
  function partsOf(answer: string): UrlParts {
    const nl = indexOf(answer, "\n");
    const head = jsonParse(strSlice(answer, 0, nl)) as UrlHead;
    const href = strSlice(answer, nl + 1);
    const protocolLen = head[1];
    const usernameLen = head[2];
    const passwordLen = head[3];
    const hostnameLen = head[4];
    const portLen = head[5];
    const searchLen = head[7];
    const hashLen = head[8];
    const len = href.length;
    let hashStart = len - hashLen;
    if (hashLen === 0 && charCodeAt(href, len - 1) === 0x23) hashStart = len - 1;
    let searchStart = hashStart - searchLen;
    if (searchLen === 0 && charCodeAt(href, hashStart - 1) === 0x3f) searchStart = hashStart - 1;
    const pathStart = searchStart - head[6];
    const hostnameEnd = portLen > 0 ? pathStart - portLen - 1 : pathStart;
    const hostnameStart = hostnameEnd - hostnameLen;
    const protocol = strSlice(href, 0, protocolLen);
    const host = hostnameLen > 0 ? strSlice(href, hostnameStart, pathStart) : "";
    const parts = objectCreate(null) as UrlParts;
    parts.href = href;
    parts.protocol = protocol;
    parts.username = usernameLen > 0 ? strSlice(href, protocolLen + 2, protocolLen + 2 + usernameLen) : "";
    const passwordStart = protocolLen + 3 + usernameLen;
    parts.password = passwordLen > 0 ? strSlice(href, passwordStart, passwordStart + passwordLen) : "";
    parts.host = host;
    parts.hostname = strSlice(href, hostnameStart, hostnameEnd);
    parts.port = portLen > 0 ? strSlice(href, pathStart - portLen, pathStart) : "";
    parts.pathname = strSlice(href, pathStart, searchStart);
    parts.search = searchLen > 0 ? strSlice(href, searchStart, hashStart) : "";
    parts.hash = hashLen > 0 ? strSlice(href, hashStart) : "";
    // Node's origin: blob: URLs' comes from the host (it parses the path); file: is opaque.
    parts.origin = head[0] !== null ? head[0] : tupleOrigin(protocol) ? `${protocol}//${host}` : "null";
    return parts;
  }

  function queryOf(search: string): string {
    return search === "" ? "" : strSlice(search, 1);
  }

  function parseOrEmpty(url: unknown, base: unknown): string {
    const input = toUSV(url);
    return hostParse(input, base === undefined ? undefined : toUSV(base));
  }

  class URL {
    // Parsing and serialization happen on the host; the guest keeps the component snapshot.
    #parts: UrlParts;
    #params: URLSearchParams | null = null;

    static {
      setSearchFromParams = (url, serialized) => {
        const answer = hostSet(url.#parts.href, "search", serialized);
        if (refused(answer)) throw new RangeErrorCtor(`Cannot update URL.search from its searchParams: ${strSlice(answer, 1)}`);
        if (answer !== "") url.#parts = partsOf(answer);
      };
      // Every settable component has the same accessor pair: read the snapshot, write through the host.
      const parts = "href protocol username password host hostname port pathname search hash".split(" ") as UrlPart[];
      for (let i = 0; i < parts.length; i++) {
        const part = parts[i];
        const desc = objectCreate(null) as PropertyDescriptor;
        desc.get = function (this: URL) {
          return this.#parts[part];
        };
        desc.set = function (this: URL, value: unknown) {
          this.#set(part, value);
        };
        desc.configurable = true;
        defineProperty(desc.get, "name", { value: `get ${part}`, configurable: true });
        defineProperty(desc.set, "name", { value: `set ${part}`, configurable: true });
        defineProperty(URL.prototype, part, desc);
      }
    }

    constructor(url: unknown, base: unknown = undefined) {
      requireArgs(arguments.length, 1, "URL");
      const input = toUSV(url);
      const baseText = base === undefined ? undefined : toUSV(base);
      const answer = hostParse(input, baseText);
      if (answer === "") throw invalidUrl(input, baseText);
      if (refused(answer)) throw urlLimitError(answer, input, baseText);
      this.#parts = partsOf(answer);
    }

    static canParse(url: unknown, base: unknown = undefined): boolean {
      requireArgs(arguments.length, 1, "URL.canParse");
      const answer = parseOrEmpty(url, base);
      return answer !== "" && !refused(answer);
    }

    static parse(url: unknown, base: unknown = undefined): URL | null {
      requireArgs(arguments.length, 1, "URL.parse");
      try {
        return new URL(url, base);
      } catch {
        return null;
      }
    }

    /**
     * Setters that fail leave the URL unchanged, except href, which throws (a TypeError, as
     * for an invalid URL). A result over one of the host's limits throws too: a RangeError
     * naming the limit, the URL unchanged.
     */
    #set(part: UrlPart, value: unknown): void {
      const text = toUSV(value);
      const answer = hostSet(this.#parts.href, part, text);
      if (answer === "") {
        if (part === "href") throw invalidUrl(text, undefined);
        return;
      }
      if (refused(answer)) {
        if (part === "href") throw urlLimitError(answer, text, undefined);
        throw new RangeErrorCtor(`Cannot set URL.${part}: ${strSlice(answer, 1)}`);
      }
      this.#parts = partsOf(answer);
      if (this.#params !== null && (part === "href" || part === "search")) {
        resetParams(this.#params, queryOf(this.#parts.search));
      }
    }

    get searchParams(): URLSearchParams {
      if (this.#params === null) {
        const params = new URLSearchParams();
        resetParams(params, queryOf(this.#parts.search));
        attachParams(params, this);
        this.#params = params;
      }
      return this.#params;
    }

    get origin(): string {
      return this.#parts.origin;
    }

    toString(): string {
      return this.#parts.href;
    }

    toJSON(): string {
      return this.#parts.href;
    }
  }

  // ---------------------------------------------------------------- TextEncoder / TextDecoder
  class TextEncoder {
    get encoding(): string {
      return "utf-8";
    }

    encode(input: unknown = ""): Uint8Array {
      return encodeUtf8(`${input}`);
    }

    encodeInto(source: unknown, destination: unknown): { read: number; written: number } {
      requireArgs(arguments.length, 2, "TextEncoder.encodeInto");
      const s = `${source}`;
      if (taTag(destination) !== "Uint8Array") {
        throw typeError('The "destination" argument must be an instance of Uint8Array');
      }
      const dest = destination as Uint8Array;
      const written = writeUtf8(s, dest, taLength(dest));
      return { read: encodedRead, written };
    }
  }

  const EMPTY_BYTES = new U8(0);

  /** A Uint8Array over the bytes of an ArrayBuffer or ArrayBufferView, read through captured getters. */
  function toBytes(input: unknown): Uint8Array {
    if (isView(input)) {
      if (taTag(input) !== undefined) return new U8(taBuffer(input), taByteOffset(input), taByteLength(input));
      return new U8(dvBuffer(input), dvByteOffset(input), dvByteLength(input));
    }
    try {
      abByteLength(input); // brand check: throws unless input is an ArrayBuffer
    } catch {
      throw typeError('The "input" argument must be an instance of ArrayBuffer or ArrayBufferView');
    }
    return new U8(input as ArrayBuffer);
  }

  function trimAscii(s: string): string {
    let start = 0;
    let end = s.length;
    while (start < end && isAsciiWhitespace(charCodeAt(s, start))) start++;
    while (end > start && isAsciiWhitespace(charCodeAt(s, end - 1))) end--;
    return strSlice(s, start, end);
  }

  class TextDecoder {
    #fatal: boolean;
    #ignoreBOM: boolean;
    #bomSeen = false;
    #state = newUtf8State();

    constructor(label: unknown = "utf-8", options: unknown = undefined) {
      const text = `${label}`;
      switch (toLowerCase(trimAscii(text))) {
        case "utf-8":
        case "utf8":
        case "unicode-1-1-utf-8":
        case "unicode11utf8":
        case "unicode20utf8":
        case "x-unicode20utf8":
          break;
        default:
          throw new RangeErrorCtor(`The "${text}" encoding is not supported`);
      }
      const o = options as { fatal?: unknown; ignoreBOM?: unknown } | null | undefined;
      this.#fatal = o != null && !!o.fatal;
      this.#ignoreBOM = o != null && !!o.ignoreBOM;
    }

    get encoding(): string {
      return "utf-8";
    }
    get fatal(): boolean {
      return this.#fatal;
    }
    get ignoreBOM(): boolean {
      return this.#ignoreBOM;
    }

    decode(input: unknown = undefined, options: unknown = undefined): string {
      const bytes = input === undefined ? EMPTY_BYTES : toBytes(input);
      const stream = options != null && !!(options as { stream?: unknown }).stream;
      try {
        let out = decodeUtf8(bytes, this.#state, this.#fatal, !stream);
        // The BOM is only looked for in the first code point of the stream.
        if (!this.#ignoreBOM && !this.#bomSeen && out.length > 0) {
          this.#bomSeen = true;
          if (charCodeAt(out, 0) === 0xfeff) out = strSlice(out, 1);
        }
        return out;
      } finally {
        if (!stream) this.#bomSeen = false;
      }
    }
  }

  // ---------------------------------------------------------------- atob / btoa
  const B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const B64_CODES = new U8(64);
  const B64_VALUES = new U8(256).fill(255);
  for (let i = 0; i < 64; i++) {
    B64_CODES[i] = charCodeAt(B64_ALPHABET, i);
    B64_VALUES[B64_CODES[i]] = i;
  }

  function latin1At(s: string, i: number): number {
    const c = charCodeAt(s, i);
    if (c > 0xff) throw domError("InvalidCharacterError", 5, "Invalid character");
    return c;
  }

  function btoa(data: unknown): string {
    requireArgs(arguments.length, 1, "btoa");
    const s = `${data}`;
    const len = s.length;
    sbStart();
    for (let i = 0; i < len; i += 3) {
      const n = len - i; // bytes in this group: 3, or 1-2 at the end (padded with "=")
      const x = (latin1At(s, i) << 16) | (n > 1 ? latin1At(s, i + 1) << 8 : 0) | (n > 2 ? latin1At(s, i + 2) : 0);
      sbPut(B64_CODES[x >> 18]);
      sbPut(B64_CODES[(x >> 12) & 63]);
      sbPut(n > 1 ? B64_CODES[(x >> 6) & 63] : 0x3d);
      sbPut(n > 2 ? B64_CODES[x & 63] : 0x3d);
    }
    return sbEnd();
  }

  /** The HTML "forgiving-base64 decode", returning a binary string. */
  function atob(data: unknown): string {
    requireArgs(arguments.length, 1, "atob");
    const s = `${data}`;
    const len = s.length;
    const bad = () => domError("InvalidCharacterError", 5, "The string to be decoded is not correctly encoded.");
    const vals = new U8(len);
    let n = 0;
    let pads = 0;
    for (let i = 0; i < len; i++) {
      const c = charCodeAt(s, i);
      if (isAsciiWhitespace(c)) continue;
      // Anything outside the alphabet is an error, and so is data after "=".
      if (c === 0x3d) pads++;
      else if (c > 0xff || B64_VALUES[c] === 255 || pads > 0) throw bad();
      else vals[n++] = B64_VALUES[c];
    }
    // Up to two "=" may end input whose length is a multiple of 4; otherwise length % 4 must not be 1.
    if (pads > 0 ? pads > 2 || (n + pads) % 4 !== 0 : n % 4 === 1) throw bad();
    sbStart();
    for (let i = 0; i < n; i += 4) {
      const k = n - i; // sextets in this group: 4, or 2-3 at the end (leftover bits are dropped)
      const x = (vals[i] << 18) | (vals[i + 1] << 12) | (k > 2 ? vals[i + 2] << 6 : 0) | (k > 3 ? vals[i + 3] : 0);
      sbPut(x >> 16);
      if (k > 2) sbPut((x >> 8) & 255);
      if (k > 3) sbPut(x & 255);
    }
    return sbEnd();
  }

  // ---------------------------------------------------------------- structuredClone / crypto
  // `options` read from `arguments`: WebIDL gives structuredClone a length of 1.
  function structuredClone(value: unknown): unknown {
    requireArgs(arguments.length, 1, "structuredClone");
    return deps.clone(value, arguments[1]);
  }

  const MAX_RANDOM_BYTES = 65536;
  const HEX_LOWER_BYTES: string[] = [];
  for (let i = 0; i < 256; i++) HEX_LOWER_BYTES[i] = (i < 16 ? "0" : "") + i.toString(16);

  const crypto = {
    getRandomValues<T>(array: T): T {
      requireArgs(arguments.length, 1, "crypto.getRandomValues");
      switch (taTag(array)) {
        case "Int8Array":
        case "Uint8Array":
        case "Uint8ClampedArray":
        case "Int16Array":
        case "Uint16Array":
        case "Int32Array":
        case "Uint32Array":
        case "BigInt64Array":
        case "BigUint64Array":
          break;
        default:
          throw domError("TypeMismatchError", 17, "The data argument must be an integer-type TypedArray");
      }
      const view = array as unknown as ArrayBufferView;
      const n = taByteLength(view);
      if (n > MAX_RANDOM_BYTES) {
        throw domError(
          "QuotaExceededError",
          22,
          `The ArrayBufferView's byte length (${n}) exceeds the number of bytes of entropy available via this API (${MAX_RANDOM_BYTES})`,
        );
      }
      if (n > 0) taSet(new U8(taBuffer(view), taByteOffset(view), n), deps.randomBytes(n));
      return array;
    },

    randomUUID(): string {
      const b = deps.randomBytes(16);
      b[6] = (b[6] & 0x0f) | 0x40; // version 4
      b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
      let out = "";
      for (let i = 0; i < 16; i++) {
        if (i === 4 || i === 6 || i === 8 || i === 10) out += "-";
        out += HEX_LOWER_BYTES[b[i]];
      }
      return out;
    },
  };
  defineValue(crypto, SymbolToStringTag, "Crypto", false);

  // ---------------------------------------------------------------- install
  // WebIDL shape: prototype members are enumerable and carry a Symbol.toStringTag.
  function webIdlClass(ctor: { prototype: object }, tag: string): void {
    const proto = ctor.prototype;
    const keys = ownKeys(proto);
    for (let i = 0; i < keys.length; i++) {
      const desc = getOwnDesc(proto, keys[i]);
      if (keys[i] === "constructor" || desc === undefined) continue;
      desc.enumerable = true;
      defineProperty(proto, keys[i], desc);
    }
    defineValue(proto, SymbolToStringTag, tag, false);
  }
  webIdlClass(URL, "URL");
  webIdlClass(URLSearchParams, "URLSearchParams");
  webIdlClass(TextEncoder, "TextEncoder");
  webIdlClass(TextDecoder, "TextDecoder");
  // Iterating a URLSearchParams yields its entries (same function object, as in WebIDL).
  defineValue(URLSearchParams.prototype, SymbolIterator, URLSearchParams.prototype.entries);

  defineValue(g, "URL", URL);
  defineValue(g, "URLSearchParams", URLSearchParams);
  defineValue(g, "TextEncoder", TextEncoder);
  defineValue(g, "TextDecoder", TextDecoder);
  defineValue(g, "atob", atob);
  defineValue(g, "btoa", btoa);
  defineValue(g, "structuredClone", structuredClone);
  defineValue(g, "crypto", crypto);

  // No shared memory or Wasm in the guest: they enable timing side channels and escape the engine's limits.
  deleteProperty(g, "SharedArrayBuffer");
  deleteProperty(g, "Atomics");
  deleteProperty(g, "WebAssembly");

  return { primeUrl };
}
