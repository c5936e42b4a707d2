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

  function abortError(message: string, name: string): Error {
    const error = new ErrorCtor(message);
    defineProperty(error, "name", { value: name, writable: true, configurable: true });
    return error;
  }

  class AbortSignal {
    #aborted = false;
    #reason: unknown = undefined;
    #listeners: ((event: { type: string; target: AbortSignal }) => void)[] = [];
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

    addEventListener(type: string, listener: unknown): void {
      if (type === "abort" && typeof listener === "function")
        this.#listeners.push(listener as (e: { type: string; target: AbortSignal }) => void);
    }

    removeEventListener(type: string, listener: unknown): void {
      if (type !== "abort") return;
      const index = this.#listeners.indexOf(listener as (e: { type: string; target: AbortSignal }) => void);
      if (index >= 0) this.#listeners.splice(index, 1);
    }

    /** Internal: AbortController and the static helpers abort through this. */
    static _abort(signal: AbortSignal, reason: unknown): void {
      if (signal.#aborted) return;
      signal.#aborted = true;
      signal.#reason = reason === undefined ? abortError("This operation was aborted", "AbortError") : reason;
      const event = { type: "abort", target: signal };
      const listeners = signal.#listeners.slice();
      signal.#listeners.length = 0;
      if (typeof signal.onabort === "function") signal.onabort(event);
      for (const listener of listeners) listener(event);
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
