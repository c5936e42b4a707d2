/**
 * The guest side of the shared-memory call channel (engines/v8/channel.ts has the host side and
 * the layout). `serve` runs as one long task on the isolate's thread and takes calls from shared
 * memory as the host writes them, so a call in a stream costs no thread wake-up on either side.
 * It ends when idle for `windowMs`, when the host asks (before any other crossing), after a call
 * that returned a promise, and when an answer does not fit (returned as the task's result instead).
 *
 * A call that returns a promise is awaited here for a few microtask turns: `serve` is async, and
 * each `await` lets the microtasks queued behind it run (the handler's continuation). An outcome
 * made in them is answered through shared memory, not through a host.done crossing (a trivial
 * async handler's warm call back to back: 110–179 → 25–72 µs p50, with the host queueing the
 * next task behind this one: CallChannel.reopen). One whose promise waits on the host (a host
 * call, a timer: their answers can only come once the task ends) or takes more turns is
 * answered "p" and arrives through host.done as before. Either way the task then ends: what the
 * call left queued (a chain it did not await) runs to its end in the task's microtask
 * checkpoint, under the call's limits, and never while a later call is open. Serving on
 * instead answered in ~12 µs, but such a tail then ran during the next call's awaits, as that
 * call's (its logs and host calls: 98 of 400 calls in a test), and V8 gives JavaScript no way
 * to see that the queue is empty.
 *
 * SELF-CONTAINED: stringified into the guest runtime (decision 001). Everything it uses is
 * captured when the runtime starts, before any guest code. Guest code cannot reach the shared
 * memory: only this closure holds it. A guest that patches typed-array or string builtins can
 * garble its own calls' text, nothing else: the host reads answers as data.
 */
/**
 * The channel's layout, the one definition both sides use: the host imports it, and the guest
 * runtime gets it as createServe's argument (the stringified function cannot import). Int32
 * ctl[12] first: [0] the state, [1] "stay" (the host clears it to end the serving task), [2] the
 * path's length, [3] the arguments' (then the answer's) length, [4] whether caps follow in
 * [5..8] (RuntimeCaps), [9..11] unused; UTF-16 text from `headerBytes` on.
 */
export const CHANNEL_LAYOUT = {
  headerBytes: 48,
  /** The header's Int32 the serving task counts taken requests in. */
  taken: 9,
  state: { idle: 0, request: 1, answer: 2, closed: 4, tooBig: 5, answerClosed: 6 },
} as const;

export type CallFn = (
  path: string,
  joinedArgs: string,
  maxOutputChars?: number,
  maxLogEntries?: number,
  maxLogBytes?: number,
  maxBridgeCallChars?: number,
) => string;

/** What the runtime tells `serve` of a call's outcomes still to come (GuestInternals). */
export interface LateOutcomes {
  gather(): boolean;
  gathered(final: boolean): string | undefined;
  waitsOnHost(): boolean;
}

export function createServe(
  call: CallFn,
  late: LateOutcomes,
  /** Captured before the web APIs remove `Atomics` from the guest's globals. */
  atomics: typeof Atomics | undefined,
  layout: typeof CHANNEL_LAYOUT,
): (memory: SharedArrayBuffer, windowMs: number, capacity: number) => Promise<string | undefined> {
  // QuickJS's build has no Atomics; only the v8 engine serves this way.
  if (!atomics) {
    return async () => {
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
  const gather = late.gather;
  const gathered = late.gathered;
  const waitsOnHost = late.waitsOnHost;
  /**
   * Microtask turns a call's promise gets to settle in before the task ends for it. A turn is
   * well under a microsecond; a handler awaiting only settled things (a body already read, a
   * cached value) settles in a few.
   */
  const MAX_TURNS = 64;
  /** The channel's states. */
  const S = layout.state;
  const TAKEN = layout.taken;

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

  return async function serve(memory, windowMs, capacity) {
    const ctl = new Int32(memory, 0, layout.headerBytes >> 2);
    const data = new Uint16(memory, layout.headerBytes, capacity);
    let idleSince = now();
    let spins = 0;
    for (;;) {
      const state = load(ctl, 0);
      if (state === S.request) {
        // Taken: the host's loop, polling for the answer, learns this thread had a core (core/busy-poll.ts).
        ctl[TAKEN] = ctl[TAKEN] + 1;
        const pathLength = ctl[2];
        const path = read(data, 0, pathLength);
        const joined = read(data, pathLength, ctl[3]);
        let out = ctl[4] ? call(path, joined, ctl[5], ctl[6], ctl[7], ctl[8]) : call(path, joined);
        // Whether this call returned a promise: the task ends after its answer (see above).
        let awaited = false;
        if (pending(out, out.length) && gather()) {
          awaited = true;
          // `await undefined`, not a promise: awaiting a value reads no `constructor` or `then`
          // a guest could have replaced.
          for (let turn = 0; ; turn++) {
            if (turn === MAX_TURNS || waitsOnHost() || load(ctl, 1) === 0) {
              out = gathered(true) ?? out;
              break;
            }
            await undefined;
            const settled = gathered(false);
            if (settled !== undefined) {
              out = settled;
              break;
            }
          }
        }
        const length = out.length;
        if (length > capacity) {
          store(ctl, 0, S.tooBig);
          return out;
        }
        for (let i = 0; i < length; i++) data[i] = apply(charCodeAt, out, [i]) as number;
        ctl[3] = length;
        if (awaited || pending(out, length)) {
          store(ctl, 0, S.answerClosed);
          return undefined;
        }
        store(ctl, 0, S.answer);
        idleSince = now();
        spins = 0;
        continue;
      }
      // Idle, or the host has not read the answer yet: end when asked or idle too long.
      if ((++spins & 1023) !== 0 && load(ctl, 1) !== 0) continue;
      if (load(ctl, 1) !== 0 && now() - idleSince <= windowMs) continue;
      if (state === S.idle && exchange(ctl, 0, S.idle, S.closed) === S.idle) return undefined;
      if (state === S.answer && exchange(ctl, 0, S.answer, S.answerClosed) === S.answer) return undefined;
      if (state !== S.idle && state !== S.answer) return undefined;
    }
  };
}
