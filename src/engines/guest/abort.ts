/**
 * AbortController and AbortSignal for the guest realm, enough for `fetch(url, { signal })`,
 * `AbortSignal.timeout(ms)` and code that listens for "abort".
 *
 * SELF-CONTAINED: injected with `toString()` after the runtime (it uses the runtime's
 * setTimeout), so it references nothing outside its body and captures builtins up front.
 */
export function installAbort(g: typeof globalThis): void {
  const defineProperty = Object.defineProperty;
  const ErrorCtor = Error;
  const setTimeoutFn = g.setTimeout;
  const brand = new WeakSet<object>();
  // Captured: the runtime's own listeners (a fetch's) live in these lists.
  const call = Function.prototype.call;
  const apply = Reflect.apply;
  const indexOf = call.bind(Array.prototype.indexOf) as (list: unknown[], item: unknown) => number;
  const splice = call.bind(Array.prototype.splice) as (list: unknown[], start: number, count: number) => unknown[];
  const slice = call.bind(Array.prototype.slice) as <T>(list: T[]) => T[];

  type Listener = ((event: { type: string; target: AbortSignal }) => void) | { handleEvent: unknown };

  function abortError(message: string, name: string): Error {
    const error = new ErrorCtor(message);
    defineProperty(error, "name", { value: name, writable: true, configurable: true });
    return error;
  }

  class AbortSignal {
    #aborted = false;
    #reason: unknown = undefined;
    #listeners: Listener[] = [];
    onabort: ((event: { type: string; target: AbortSignal }) => void) | null = null;

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

    /** As EventTarget's: a function or an object with handleEvent, each at most once. */
    addEventListener(type: string, listener: unknown): void {
      if (type !== "abort" || this.#aborted) return;
      if (typeof listener !== "function" && (typeof listener !== "object" || listener === null)) return;
      const list = this.#listeners;
      if (indexOf(list, listener) < 0) list[list.length] = listener as Listener;
    }

    removeEventListener(type: string, listener: unknown): void {
      if (type !== "abort") return;
      const index = indexOf(this.#listeners, listener);
      if (index >= 0) splice(this.#listeners, index, 1);
    }

    /** Internal: AbortController and the static helpers abort through this. */
    static _abort(signal: AbortSignal, reason: unknown): void {
      if (signal.#aborted) return;
      signal.#aborted = true;
      signal.#reason = reason === undefined ? abortError("This operation was aborted", "AbortError") : reason;
      const event = { type: "abort", target: signal };
      // Every listener runs, as EventTarget's dispatch does, whatever an earlier one threw: one
      // a fetch added ends the host's exchange and rejects the guest's promise. The first error
      // is thrown once all have run (uncaught, it fails the run, as Deno's dispatch does).
      let failed = false;
      let first: unknown;
      const invoke = (listener: unknown) => {
        try {
          if (typeof listener === "function") apply(listener, signal, [event]);
          else if (typeof listener === "object" && listener !== null) {
            const handle = (listener as { handleEvent: unknown }).handleEvent;
            if (typeof handle === "function") apply(handle, listener, [event]);
          }
        } catch (error) {
          if (!failed) {
            failed = true;
            first = error;
          }
        }
      };
      if (typeof signal.onabort === "function") invoke(signal.onabort);
      // Added during the dispatch: not called; removed during it: not called either.
      const listeners = slice(signal.#listeners);
      for (let i = 0; i < listeners.length; i++) if (indexOf(signal.#listeners, listeners[i]) >= 0) invoke(listeners[i]);
      signal.#listeners = [];
      if (failed) throw first;
    }

    static abort(reason?: unknown): AbortSignal {
      const signal = new AbortSignal(brand);
      AbortSignal._abort(signal, reason);
      return signal;
    }

    static timeout(ms: number): AbortSignal {
      const signal = new AbortSignal(brand);
      setTimeoutFn(() => AbortSignal._abort(signal, abortError("The operation timed out.", "TimeoutError")), ms);
      return signal;
    }

    static any(signals: AbortSignal[]): AbortSignal {
      const signal = new AbortSignal(brand);
      for (const source of signals) {
        if (source.aborted) {
          AbortSignal._abort(signal, source.reason);
          break;
        }
        source.addEventListener("abort", () => AbortSignal._abort(signal, source.reason));
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
      AbortSignal._abort(this.#signal, reason);
    }
  }

  defineProperty(g, "AbortSignal", { value: AbortSignal, writable: true, configurable: true });
  defineProperty(g, "AbortController", { value: AbortController, writable: true, configurable: true });
}

/** True for an AbortSignal of the guest realm (duck-typed: the fetch wrapper only reads it). */
export type GuestAbortSignal = { aborted: boolean; reason: unknown; addEventListener(type: "abort", fn: () => void): void };
