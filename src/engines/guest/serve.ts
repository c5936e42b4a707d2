/**
 * The guest side of the shared-memory call channel (engines/v8/channel.ts has the host side and
 * the layout). `serve` runs as one long task on the isolate's thread and takes calls from shared
 * memory as the host writes them, so a call in a stream costs no thread wake-up on either side.
 * It ends when idle for `windowMs`, when the host asks (before any other crossing), after a call
 * that returned a promise (its continuation needs the task to end: microtasks run then), and
 * when an answer does not fit (returned as the task's result instead).
 *
 * SELF-CONTAINED: stringified into the guest runtime (decision 001). Everything it uses is
 * captured when the runtime starts, before any guest code. Guest code cannot reach the shared
 * memory: only this closure holds it. A guest that patches typed-array or string builtins can
 * garble its own calls' text, nothing else: the host reads answers as data.
 */
export type CallFn = (
  path: string,
  joinedArgs: string,
  maxOutputChars?: number,
  maxLogEntries?: number,
  maxLogBytes?: number,
) => string;

export function createServe(
  call: CallFn,
  /** Captured before the web APIs remove `Atomics` from the guest's globals. */
  atomics: typeof Atomics | undefined,
): (memory: SharedArrayBuffer, windowMs: number, capacity: number) => string | undefined {
  // QuickJS's build has no Atomics; only the v8 engine serves this way.
  if (!atomics) {
    return () => {
      throw new Error("serving calls through shared memory needs Atomics");
    };
  }
  const load = atomics.load;
  const store = atomics.store;
  const exchange = atomics.compareExchange;
  const Int32 = Int32Array;
  const Uint16 = Uint16Array;
  const fromCharCode = String.fromCharCode;
  const charCodeAt = String.prototype.charCodeAt;
  const indexOf = String.prototype.indexOf;
  const apply = Reflect.apply;
  const now = Date.now;
  // The layout (engines/v8/channel.ts): ctl[0] state, [1] stay, [2] path length, [3] text
  // length, [4] caps sent, [5..7] caps; UTF-16 text from byte 32.
  const IDLE = 0;
  const REQUEST = 1;
  const ANSWER = 2;
  const CLOSED = 4;
  const TOO_BIG = 5;
  const ANSWER_CLOSED = 6;

  // The views never meet a prototype: only element reads and writes, and lengths from the
  // header, never `.length`, `.buffer` or `subarray` (a guest-patched accessor or species
  // would be handed the view, and with it the shared memory).
  function read(data: Uint16Array, start: number, length: number): string {
    let text = "";
    let i = start;
    const end = start + length;
    for (; i + 8 <= end; i += 8) {
      text += fromCharCode(data[i], data[i + 1], data[i + 2], data[i + 3], data[i + 4], data[i + 5], data[i + 6], data[i + 7]);
    }
    for (; i < end; i++) text += fromCharCode(data[i]);
    return text;
  }

  /** Does a joined answer hold a "p" (an outcome that arrives later through host.done)? */
  function pending(out: string, length: number): boolean {
    if (out === "p") return true;
    if (length < 2) return false;
    if (apply(indexOf, out, ["p\u0001"]) === 0) return true;
    if (apply(indexOf, out, ["\u0001p\u0001"]) >= 0) return true;
    return apply(indexOf, out, ["\u0001p", length - 2]) === length - 2;
  }

  return function serve(memory, windowMs, capacity) {
    const ctl = new Int32(memory, 0, 8);
    const data = new Uint16(memory, 32, capacity);
    let idleSince = now();
    let spins = 0;
    for (;;) {
      const state = load(ctl, 0);
      if (state === REQUEST) {
        const pathLength = ctl[2];
        const path = read(data, 0, pathLength);
        const joined = read(data, pathLength, ctl[3]);
        const out = ctl[4] ? call(path, joined, ctl[5], ctl[6], ctl[7]) : call(path, joined);
        const length = out.length;
        if (length > capacity) {
          store(ctl, 0, TOO_BIG);
          return out;
        }
        for (let i = 0; i < length; i++) data[i] = apply(charCodeAt, out, [i]) as number;
        ctl[3] = length;
        if (pending(out, length)) {
          store(ctl, 0, ANSWER_CLOSED);
          return undefined;
        }
        store(ctl, 0, ANSWER);
        idleSince = now();
        spins = 0;
        continue;
      }
      // Idle, or the host has not read the answer yet: end when asked or idle too long.
      if ((++spins & 1023) !== 0 && load(ctl, 1) !== 0) continue;
      if (load(ctl, 1) !== 0 && now() - idleSince <= windowMs) continue;
      if (state === IDLE && exchange(ctl, 0, IDLE, CLOSED) === IDLE) return undefined;
      if (state === ANSWER && exchange(ctl, 0, ANSWER, ANSWER_CLOSED) === ANSWER) return undefined;
      if (state !== IDLE && state !== ANSWER) return undefined;
    }
  };
}
