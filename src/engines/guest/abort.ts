/**
 * AbortController and AbortSignal for the guest realm, enough for `fetch(url, { signal })`,
 * `AbortSignal.timeout(ms)` and code that listens for "abort".
 *
 * SELF-CONTAINED: injected with `toString()` after the runtime (it uses the runtime's
 * setTimeout), so it references nothing outside its body and captures builtins up front.
 */
export function installAbort(g: typeof globalThis): void {
  const defineProperty = Object.defineProperty;
  // The realm's own (installed first, dom-exception.ts), captured before guest code can replace it.
  const DOMExceptionCtor = g.DOMException;
  const setTimeoutFn = g.setTimeout;
  const NumberCtor = Number;
  const NumberIsFinite = Number.isFinite;
  const mathTrunc = Math.trunc;
  const TypeErrorCtor = TypeError;
  const brand = new WeakSet<object>();
  // Captured: the runtime's own listeners (a fetch's) live in these lists.
  const call = Function.prototype.call;
  const apply = Reflect.apply;
  const indexOf = call.bind(Array.prototype.indexOf) as (list: unknown[], item: unknown) => number;
  const splice = call.bind(Array.prototype.splice) as (list: unknown[], start: number, count: number) => unknown[];
  const slice = call.bind(Array.prototype.slice) as <T>(list: T[]) => T[];

  type Handler = ((event: { type: string }) => void) | { handleEvent: unknown };
  /** One registration: EventTarget keys it by type, callback and capture. */
  type Entry = { type: string; callback: Handler; capture: boolean; once: boolean; removed: boolean };

  /** A default abort reason, as Node makes it: a DOMException named AbortError (code 20) or TimeoutError (23). */
  function abortError(message: string, name: string): Error {
    return new DOMExceptionCtor(message, name);
  }

  // Set by AbortSignal's static initializer, which alone can reach its private fields; kept in
  // this closure so that guest code cannot abort a signal it was only handed (a fetch's own).
  let abortSignal: (signal: AbortSignal, reason: unknown) => void = () => {};

  class AbortSignal {
    #aborted = false;
    #reason: unknown = undefined;
    #entries: Entry[] = [];
    onabort: ((event: { type: string; target: AbortSignal }) => void) | null = null;

    static {
      abortSignal = (signal, reason) => AbortSignal.#abort(signal, reason);
    }

    constructor(key?: unknown) {
      if (key !== brand) throw new TypeError("Illegal constructor");
      brand.add(this);
    }

    get aborted(): boolean {
      return this.#aborted;
    }

    get reason(): unknown {
      return this.#reason;
    }

    throwIfAborted(): void {
      if (this.#aborted) throw this.#reason;
    }

    /**
     * As EventTarget's: a function or an object with handleEvent, once per type, callback and
     * capture; `once` removes it before its first call, `signal` removes it when that aborts.
     */
    addEventListener(type: string, listener: unknown, options?: unknown): void {
      if (typeof listener !== "function" && (typeof listener !== "object" || listener === null)) return;
      type = `${type}`;
      let capture = false;
      let once = false;
      let signal: unknown;
      if (typeof options === "boolean") capture = options;
      else if (typeof options === "object" && options !== null) {
        const o = options as { capture?: unknown; once?: unknown; signal?: unknown };
        capture = !!o.capture;
        once = !!o.once;
        signal = o.signal;
        if (signal !== undefined && !brand.has(signal as object))
          throw new TypeError('The "signal" option must be an AbortSignal');
      }
      // (Only the option's signal refuses it: added to an aborted signal, a listener is kept, and
      // a later dispatchEvent of "abort" calls it, as in Node.)
      if (signal !== undefined && (signal as AbortSignal).#aborted) return;
      const entries = this.#entries;
      for (let i = 0; i < entries.length; i++) {
        const e = entries[i];
        if (e.type === type && e.callback === listener && e.capture === capture) return;
      }
      const entry: Entry = { type, callback: listener as Handler, capture, once, removed: false };
      entries[entries.length] = entry;
      if (signal !== undefined) {
        const removers = (signal as AbortSignal).#entries;
        removers[removers.length] = {
          type: "abort",
          callback: () => this.#remove(entry),
          capture: false,
          once: true,
          removed: false,
        };
      }
    }

    removeEventListener(type: string, listener: unknown, options?: unknown): void {
      const capture =
        typeof options === "boolean"
          ? options
          : typeof options === "object" && options !== null && !!(options as { capture?: unknown }).capture;
      const entries = this.#entries;
      for (let i = 0; i < entries.length; i++) {
        const e = entries[i];
        if (e.type === `${type}` && e.callback === listener && e.capture === capture) {
          this.#remove(e);
          return;
        }
      }
    }

    /** As EventTarget's, for an event object with a `type` (the guest has no Event class). */
    dispatchEvent(event: unknown): boolean {
      if (typeof event !== "object" || event === null || typeof (event as { type?: unknown }).type !== "string")
        throw new TypeError('The "event" argument must be an object with a string "type"');
      this.#dispatch(event as { type: string });
      return (event as { defaultPrevented?: unknown }).defaultPrevented !== true;
    }

    #remove(entry: Entry): void {
      entry.removed = true;
      const index = indexOf(this.#entries, entry);
      if (index >= 0) splice(this.#entries, index, 1);
    }

    /**
     * Every listener runs, as EventTarget's dispatch does, whatever an earlier one threw: one a
     * fetch added ends the host's exchange and rejects the guest's promise. The first error is
     * thrown once all have run (uncaught, it fails the run, as Deno's dispatch does).
     */
    #dispatch(event: { type: string }): void {
      let failed = false;
      let first: unknown;
      const invoke = (callback: unknown) => {
        try {
          if (typeof callback === "function") apply(callback, this, [event]);
          else if (typeof callback === "object" && callback !== null) {
            const handle = (callback as { handleEvent: unknown }).handleEvent;
            if (typeof handle === "function") apply(handle, callback, [event]);
          }
        } catch (error) {
          if (!failed) {
            failed = true;
            first = error;
          }
        }
      };
      if (event.type === "abort" && typeof this.onabort === "function") invoke(this.onabort);
      // Added during the dispatch: not called; removed during it: not called either.
      const entries = slice(this.#entries);
      for (let i = 0; i < entries.length; i++) {
        const entry = entries[i];
        if (entry.type !== event.type || entry.removed) continue;
        if (entry.once) this.#remove(entry);
        invoke(entry.callback);
      }
      if (failed) throw first;
    }

    static #abort(signal: AbortSignal, reason: unknown): void {
      if (signal.#aborted) return;
      signal.#aborted = true;
      signal.#reason = reason === undefined ? abortError("This operation was aborted", "AbortError") : reason;
      try {
        signal.#dispatch({ type: "abort", target: signal } as { type: string });
      } finally {
        // An abort happens once: its listeners (a fetch's among them) are released.
        const entries = signal.#entries;
        const kept: Entry[] = [];
        for (let i = 0; i < entries.length; i++) if (entries[i].type !== "abort") kept[kept.length] = entries[i];
        signal.#entries = kept;
      }
    }

    static abort(reason?: unknown): AbortSignal {
      const signal = new AbortSignal(brand);
      abortSignal(signal, reason);
      return signal;
    }

    /** WebIDL's [EnforceRange] unsigned long long: not a finite number, or out of range, is a TypeError. */
    static timeout(ms: number): AbortSignal {
      const asked = NumberCtor(ms);
      if (!NumberIsFinite(asked)) throw new TypeErrorCtor("AbortSignal.timeout: the delay must be a finite number");
      const delay = mathTrunc(asked);
      if (delay < 0 || delay > 2 ** 53 - 1)
        throw new TypeErrorCtor("AbortSignal.timeout: the delay must be from 0 to 2^53 - 1 ms");
      const signal = new AbortSignal(brand);
      // A delay no timer takes (past 2^31 - 1 ms, 24.8 days) outlasts any run: never armed
      // (setTimeout would make it 1 ms).
      if (delay <= 2 ** 31 - 1) {
        setTimeoutFn(() => abortSignal(signal, abortError("The operation was aborted due to timeout", "TimeoutError")), delay);
      }
      return signal;
    }

    static any(signals: AbortSignal[]): AbortSignal {
      const signal = new AbortSignal(brand);
      for (const source of signals) {
        if (source.aborted) {
          abortSignal(signal, source.reason);
          break;
        }
        source.addEventListener("abort", () => abortSignal(signal, source.reason));
      }
      return signal;
    }
  }

  class AbortController {
    #signal = new AbortSignal(brand);

    get signal(): AbortSignal {
      return this.#signal;
    }

    abort(reason?: unknown): void {
      abortSignal(this.#signal, reason);
    }
  }

  defineProperty(g, "AbortSignal", { value: AbortSignal, writable: true, configurable: true });
  defineProperty(g, "AbortController", { value: AbortController, writable: true, configurable: true });
}

/** True for an AbortSignal of the guest realm (duck-typed: the fetch wrapper only reads it). */
export type GuestAbortSignal = { aborted: boolean; reason: unknown; addEventListener(type: "abort", fn: () => void): void };
