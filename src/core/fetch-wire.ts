import type { CodecExtension } from "./codec.js";

/**
 * Bounds on a body read: `signal` cancels it (the read rejects with the signal's reason), and a
 * body past `maxBytes` is refused as it arrives, with `exceeded` set, instead of held whole.
 */
export interface BodyReadBounds {
  signal: AbortSignal;
  maxBytes: number;
  exceeded?: boolean;
  /** Told of each chunk as it arrives; the read goes on once what it returns settles (an AnswerGate's room). */
  chunk?: (bytes: number) => Promise<void> | undefined;
}

/**
 * The Request / Response / Headers wire for realms with the standard fetch classes: the host
 * (Node's undici classes) and the deno engine's guest (Deno's own). The v8 and quickjs guests
 * use their own classes (src/engines/guest/fetch-types.ts). Bodies are streams, read
 * asynchronously, while the codec is synchronous: `readBodies` buffers the bodies of the values
 * about to cross first.
 */
export interface FetchWire {
  /** Buffer the bodies of Requests and Responses among `values` (and one level inside arrays and objects). */
  readBodies(values: unknown[], bounds?: BodyReadBounds): Promise<void>;
  /**
   * Buffer one message's body by reading it, not a clone: the message's own body is used up. For
   * a message nothing else reads (the brokered fetch's Response), so it is held once, not three
   * times (a clone's tee keeps every chunk for the unread branch). Returns the bytes.
   */
  takeBody(message: Request | Response, chunk?: BodyReadBounds["chunk"]): Promise<Uint8Array | null>;
  /**
   * True when `values` hold a Request or Response whose body is not buffered yet (so readBodies
   * is needed). One without a body is buffered here, as no bytes.
   */
  needsBodies(values: unknown[]): boolean;
  /**
   * From now on a Request's wire carries `parse(url)` as `p`: the host's parse of its URL, which
   * the v8 and QuickJS guests keep instead of crossing back to have it parsed (~30 µs of a call
   * and ~60 µs of its CPU charge on v8). The other decoders ignore it.
   */
  sendUrlParts(parse: (url: string) => string): void;
  extension: CodecExtension;
}

/**
 * SELF-CONTAINED: the deno engine injects `createFetchWire.toString()` into its guest, so both
 * sides of the wire are this one function. It uses only the realm's globals.
 */
export function createFetchWire(): FetchWire {
  const RequestCtor = Request;
  const ResponseCtor = Response;
  const HeadersCtor = Headers;
  const bodies = new WeakMap<object, Uint8Array | null>();
  /**
   * Messages decode() built: their bytes are in `bodies` from the start, so they cross again from
   * any depth (the process host's worker passes on what its engine's guest returned). Unlike a
   * read copy, the message's own body is that body: once it is read, it has none to pass on.
   */
  const decoded = new WeakSet<object>();
  const NULL_BODY_STATUS = [101, 204, 205, 304];
  const isArray = Array.isArray;
  const values = Object.values;
  const getProto = Object.getPrototypeOf;
  const defineProperty = Object.defineProperty;
  const callOf = Function.prototype.call;
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const Uint8ArrayCtor = Uint8Array;
  const setTimeoutOf = setTimeout;
  const now = () => performance.now();
  /** The longest array visit() indexes; a longer one may be sparse (see visit). */
  const INDEXED_MAX = 1024;
  /**
   * The most header entries one crossing value (a result, a call's arguments) may hold, in all
   * its Headers, Requests and Responses together. undici's Headers take ~600 bytes of heap an
   * entry: a guest's Response with 600,000 (7 MB of output, under maxOutputBytes) grew the host
   * by ~350 MB and held its loop 0.3-2.2 s collecting it, and 60 references to one Headers of
   * 10,000 decoded as 60 of them. Node's HTTP server reads at most 2,000 from a request.
   */
  const MAX_HEADERS = 10_000;
  /**
   * The most Requests, Responses and Headers one crossing value may hold, together. undici
   * builds each slowly: 300,000 `new Request("a:")` from a guest (13.5 MB, under the objects cap)
   * held the host's loop 4.8 s and kept 669 MB; 999,000 empty Responses of crafted text 15 s
   * and 1.3 GB. A run makes at most maxBridgeCalls (1,000 by default) fetches.
   */
  const MAX_MESSAGES = 1_000;
  /**
   * Header entries and messages encoded, and decoded, in the crossing under way: reset by the
   * codec's begin, which a result's exports (and an encode inside another) do not call.
   */
  let encodedHeaders = 0;
  let decodedHeaders = 0;
  let encodedMessages = 0;
  let decodedMessages = 0;
  const tooManyMessages = (count: number) =>
    new TypeError(`Requests, Responses and Headers cannot cross: the value holds ${count} of them, at most ${MAX_MESSAGES}`);
  /** One more message put on the wire in this crossing; past MAX_MESSAGES, refused before it is made. */
  const countEncoded = (refuse: (reason: string) => never) => {
    if (++encodedMessages > MAX_MESSAGES)
      refuse(
        "brings the Requests, Responses and Headers of one crossing to " +
          encodedMessages +
          "; at most " +
          MAX_MESSAGES +
          " cross at once",
      );
  };
  /** A Headers' entries for the wire; past MAX_HEADERS in this value, refused here, where it is made. */
  const wireHeaders = (headers: Headers, refuse: (reason: string) => never): [string, string][] => {
    const list = [...headers];
    encodedHeaders += list.length;
    if (encodedHeaders > MAX_HEADERS)
      refuse("brings the header entries of one crossing to " + encodedHeaders + "; at most " + MAX_HEADERS + " cross at once");
    return list;
  };
  /** How long a body read may keep the thread before it lets timers run. */
  const YIELD_EVERY_MS = 5;
  /**
   * Longer arrays are not searched for messages: each item encodes to at least two characters,
   * past the default output and host-call limits, so the codec refuses them anyway. Searched, a
   * sparse array of 2**32-1 holes held a deno guest past its wall time before that refusal.
   */
  const MAX_SEARCHED_ITEMS = 1 << 24;
  /** Longer URLs are not kept by the guests' parse cache (web-apis.ts): no parts are sent for them. */
  const URL_PARTS_MAX_CHARS = 511;
  let urlParts: ((url: string) => string) | undefined;

  function visit(value: unknown, depth: number, found: (message: Request | Response) => void): void {
    if (value === null || typeof value !== "object") return;
    // Plain objects and arrays, nearly every value, are not messages: `instanceof` (~25 ns
    // each here) only for the rest. A batch of 32 events took 29 µs before, most of it there.
    const proto = getProto(value);
    if (proto !== ObjectProto && proto !== ArrayProto && proto !== null) {
      if (value instanceof RequestCtor || value instanceof ResponseCtor) {
        if (!bodies.has(value) || (decoded.has(value) && value.bodyUsed)) found(value);
        return;
      }
    }
    if (depth >= 2) return;
    // Holes hold nothing: a long array is visited by its own elements only (indexing all of
    // `new Array(2 ** 32 - 1)` took the whole wall time). A short one, nearly every one, is indexed.
    const array = isArray(value);
    if (array && value.length > MAX_SEARCHED_ITEMS) return;
    const items = array && value.length <= INDEXED_MAX ? value : values(value);
    if (items.length > MAX_SEARCHED_ITEMS) return;
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if (item !== null && typeof item === "object") visit(item, depth + 1, found);
    }
  }

  /** Why a message whose body was never read cannot cross: it sat where bodies are not read. */
  function unread(kind: string): string {
    return `a ${kind} crosses only in a call's arguments, a run's input or a returned value, at most 2 levels inside them (where its body is read first), never in globals`;
  }

  const USED = "its body was already read (bodyUsed): pass one whose body is unread";

  /** The bytes a message crosses with, once its body was read (or it was decoded with them). */
  function bodyOf(message: Request | Response, kind: string): Uint8Array | null {
    if (!bodies.has(message)) throw new TypeError(unread(kind));
    if (decoded.has(message) && message.bodyUsed) throw new TypeError(USED);
    return bodies.get(message) ?? null;
  }

  /**
   * A fetched response's url and redirected: the constructor cannot set them, so read-only own
   * properties, as safe-fetch sets them; and a clone() that keeps them (the realm's own clone
   * makes a Response without them: a Deno guest's clone of a fetched response had url "").
   */
  function withOrigin(response: Response, url: string, redirected: boolean): void {
    defineProperty(response, "url", { value: url });
    // Fetched: "basic", as the realm's own fetch reports it (a constructed Response is "default").
    defineProperty(response, "type", { value: "basic" });
    if (redirected) defineProperty(response, "redirected", { value: true });
    const clone = response.clone;
    defineProperty(response, "clone", {
      value: function cloneWithOrigin(this: Response) {
        const copy = callOf.call(clone, this) as Response;
        withOrigin(copy, url, redirected);
        return copy;
      },
      writable: true,
      configurable: true,
    });
  }

  /** A message decode() built, with the body it was built with. */
  function rebuilt<T extends Request | Response>(message: T, body: Uint8Array | null): T {
    bodies.set(message, body);
    decoded.add(message);
    return message;
  }

  /**
   * A clone's body, chunk by chunk, counted as it arrives (a streamed body has no length to
   * trust). A stream that always has a chunk ready settles every read in a microtask, so the
   * loop yields to the realm's timers every few milliseconds: otherwise no timer (the wall time
   * that aborts it) could run, and one that sent empty chunks held the thread for good.
   */
  async function readBounded(copy: Request | Response, bounds: BodyReadBounds): Promise<Uint8Array> {
    const reader = (copy.body as ReadableStream<Uint8Array>).getReader();
    const stop = () => void reader.cancel().catch(() => {});
    bounds.signal.addEventListener("abort", stop, { once: true });
    const chunks: Uint8Array[] = [];
    let size = 0;
    let sliceStarted = now();
    try {
      for (;;) {
        if (bounds.signal.aborted) throw bounds.signal.reason;
        const { done, value } = await reader.read();
        // A cancel ends a pending read as if the body were done: check the signal once more.
        if (bounds.signal.aborted) throw bounds.signal.reason;
        if (done) break;
        // As undici refuses when it reads a body whole. A string's byteLength is undefined:
        // counted, it made the size NaN, which passes every bound.
        if (!(value instanceof Uint8ArrayCtor)) {
          stop();
          throw new TypeError("a body chunk is not a Uint8Array");
        }
        size += value.byteLength;
        if (size > bounds.maxBytes) {
          bounds.exceeded = true;
          stop();
          throw new RangeError(`a body passed ${bounds.maxBytes} bytes`);
        }
        if (value.byteLength > 0) chunks.push(value);
        const room = bounds.chunk?.(value.byteLength);
        if (room) await room;
        if (now() - sliceStarted >= YIELD_EVERY_MS) {
          await new Promise((resolve) => setTimeoutOf(resolve, 0));
          sliceStarted = now();
        }
      }
    } finally {
      bounds.signal.removeEventListener("abort", stop);
    }
    // One chunk (a body made from bytes in memory): it is the body, not copied once more.
    if (chunks.length === 1 && (chunks[0] as Uint8Array).byteLength === size) return chunks[0] as Uint8Array;
    const bytes = new Uint8Array(size);
    let at = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, at);
      at += chunk.byteLength;
    }
    return bytes;
  }

  return {
    async readBodies(list, bounds) {
      const pending: Promise<void>[] = [];
      const read = (message: Request | Response) => {
        // Named here: the clone's own error for it reads "unusable".
        if (message.bodyUsed) throw new TypeError(USED);
        const copy = message.clone();
        const reading =
          copy.body === null
            ? Promise.resolve(null)
            : bounds
              ? readBounded(copy, bounds)
              : copy.arrayBuffer().then((buffer) => new Uint8Array(buffer));
        pending.push(reading.then((bytes) => void bodies.set(message, bytes)));
      };
      for (const value of list) visit(value, 0, read);
      await Promise.all(pending);
    },
    async takeBody(message, chunk) {
      let bytes: Uint8Array | null = null;
      if (message.body !== null) {
        if (!chunk) bytes = new Uint8Array(await message.arrayBuffer());
        else {
          // Counted as it arrives (an AnswerGate): the read waits for room between chunks.
          const never = new AbortController().signal;
          bytes = await readBounded(message, { signal: never, maxBytes: Number.POSITIVE_INFINITY, chunk });
        }
      }
      bodies.set(message, bytes);
      return bytes;
    },
    sendUrlParts(parse) {
      urlParts = parse;
    },
    needsBodies(list) {
      let needed = false;
      for (const value of list)
        visit(value, 0, (message) => {
          // No body to read (a GET's Request): its bytes are known now. Read as the others, each
          // one cost a clone, a timer and an AbortController: ~50 µs of a warm call's ~100.
          if (message.body === null && !message.bodyUsed) bodies.set(message, null);
          else needed = true;
        });
      return needed;
    },
    extension: {
      begin() {
        encodedHeaders = 0;
        decodedHeaders = 0;
        encodedMessages = 0;
        decodedMessages = 0;
      },
      // A literal (own elements: in the deno engine this runs in the guest's realm), read by index.
      mark: () => [encodedHeaders, encodedMessages],
      rewind(mark) {
        encodedHeaders = mark[0];
        encodedMessages = mark[1];
      },
      encode(value, refuse) {
        if (value instanceof HeadersCtor) {
          countEncoded(refuse);
          return { $: "H", h: wireHeaders(value, refuse) };
        }
        if (value instanceof RequestCtor) {
          countEncoded(refuse);
          const b = bodyOf(value, "Request");
          const m = value.method;
          const u = value.url;
          const h = wireHeaders(value.headers, refuse);
          // The redirect mode the host's fetch honours; absent for "follow", the default.
          const r = value.redirect === "error" || value.redirect === "manual" ? value.redirect : undefined;
          const p = urlParts !== undefined && u.length <= URL_PARTS_MAX_CHARS ? urlParts(u) : undefined;
          // Literals only, never assignments: in the deno engine this runs in the guest's realm,
          // where a setter a guest put on Object.prototype would take an assigned field.
          if (r === undefined) return p === undefined ? { $: "Q", m, u, h, b } : { $: "Q", m, u, h, b, p };
          return p === undefined ? { $: "Q", m, u, h, b, r } : { $: "Q", m, u, h, b, r, p };
        }
        if (value instanceof ResponseCtor) {
          countEncoded(refuse);
          const b = bodyOf(value, "Response");
          // url and redirected say where a fetched response came from (fetch's own, or one
          // safe-fetch set); a Response made with the constructor has "" and false.
          return {
            $: "R",
            s: value.status,
            t: value.statusText,
            u: value.url,
            r: value.redirected,
            h: wireHeaders(value.headers, refuse),
            b,
          };
        }
        return undefined;
      },
      decode(tagged, revive) {
        // Counted before anything is built: the constructors are the cost.
        if (++decodedMessages > MAX_MESSAGES) throw tooManyMessages(decodedMessages);
        const headers = revive(tagged.h, "h") as [string, string][];
        if (isArray(headers)) decodedHeaders += headers.length;
        if (decodedHeaders > MAX_HEADERS)
          throw new TypeError(`the value holds ${decodedHeaders} header entries; at most ${MAX_HEADERS} cross`);
        const body = (revive(tagged.b, "b") ?? null) as Uint8Array | null;
        switch (tagged.$) {
          case "H":
            return new HeadersCtor(headers);
          case "Q": {
            const method = String(tagged.m);
            const withBody = body !== null && method !== "GET" && method !== "HEAD";
            const r = tagged.r;
            if (r !== undefined && r !== "error" && r !== "manual") throw new TypeError("Malformed fetch wire value: redirect");
            const redirect: "follow" | "error" | "manual" = r ?? "follow";
            return rebuilt(
              new RequestCtor(String(tagged.u), { method, headers, body: withBody ? body : null, redirect }),
              withBody ? body : null,
            );
          }
          case "R": {
            const status = Number(tagged.s);
            if (status === 0) return rebuilt(ResponseCtor.error(), null);
            const nullBody = NULL_BODY_STATUS.includes(status);
            const response = rebuilt(
              new ResponseCtor(nullBody ? null : body, { status, statusText: String(tagged.t ?? ""), headers }),
              nullBody ? null : body,
            );
            if (typeof tagged.u === "string" && tagged.u !== "") withOrigin(response, tagged.u, tagged.r === true);
            return response;
          }
          default:
            return undefined;
        }
      },
    },
  };
}

let madeHostWire: FetchWire | undefined;

/**
 * The host's wire (see createFetchWire), made on first use. It reads the Request, Response and
 * Headers globals, and Node loads its fetch implementation (undici, and with it http, tls, http2
 * and zlib) on the first touch: 54 ms of every process host worker's start (profiled), a worker
 * that needs none of it unless it encodes a class instance the codec does not know. The sandbox
 * makes it at import (sandbox.ts): the load installs a global dispatcher symbol, which must not
 * happen in the middle of a run.
 */
export function hostWire(): FetchWire {
  madeHostWire ??= createFetchWire();
  return madeHostWire;
}

export const readBodies: FetchWire["readBodies"] = (values, bounds) => hostWire().readBodies(values, bounds);
export const takeBody: FetchWire["takeBody"] = (message, chunk) => hostWire().takeBody(message, chunk);
export const needsBodies: FetchWire["needsBodies"] = (values) => hostWire().needsBodies(values);
export const hostFetchExtension: CodecExtension = {
  // Only a wire made already has counts to reset: making it here would load undici into every
  // process host worker at its first encode (54 ms of its start; see hostWire).
  begin: () => madeHostWire?.extension.begin?.(),
  mark: () => madeHostWire?.extension.mark?.() ?? [0, 0],
  rewind: (mark) => madeHostWire?.extension.rewind?.(mark),
  encode: (value, refuse) => hostWire().extension.encode(value, refuse),
  decode: (tagged, revive) => hostWire().extension.decode(tagged, revive),
};
