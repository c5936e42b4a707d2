/**
 * Whether anything a run started is still pending once its outcome is out: a timer or interval
 * (also `node:timers`, which reaches Deno's own timers, not cordon's), an async op (a listener's
 * accept, a socket or file read, a `node:worker_threads` Worker's message port, a fetch of Deno's
 * own), or a resource left open (a listener, a server, a file). Any of them could run guest code
 * during the next caller's run and read its data, so such a process is reported dirty and retired.
 *
 * Deno's core tracks pending ops and timers when leak tracing is on (what `deno test
 * --trace-leaks` uses): it is turned on before a function's first run, and the bootstrap's own
 * input read (the host's frames) is started with it off, so every op or timer it lists is the guest's.
 *
 * SELF-CONTAINED: stringified into the bootstrap script like the other parts (script.ts), created
 * before any guest code runs; once guest code has run it calls only what it captured.
 */

export interface PendingWatch {
  /** Track the ops and timers started from now on (before a function's first run). */
  track(): void;
  /** Run `start` with tracking off: the bootstrap's own ops (its read of the host's frames) are never counted. */
  untracked<T>(start: () => T): T;
  /** Records the resources open now (at boot), as every later check must find them. */
  snapshot(): void;
  /** True when an op, a timer or a resource opened since the snapshot is still pending. */
  pending(): boolean;
}

// biome-ignore lint/suspicious/noExplicitAny: Deno's internal core, untyped.
type Any = any;

/** `core` is `Deno[Deno.internal].core`, read before any guest code (undefined: every check fails). */
export function createPendingWatch(core: Any): PendingWatch {
  const setEnabled = core?.setLeakTracingEnabled as ((on: boolean) => void) | undefined;
  const isEnabled = core?.isLeakTracingEnabled as (() => boolean) | undefined;
  const allTraces = core?.getAllLeakTraces as (() => Map<unknown, unknown>) | undefined;
  const resources = core?.resources as (() => Record<string, string>) | undefined;
  const mapSize = Object.getOwnPropertyDescriptor(Map.prototype, "size")?.get as () => number;
  const callOf = Function.prototype.call;
  const sizeOf = callOf.bind(mapSize) as unknown as (map: Map<unknown, unknown>) => number;
  const ownKeys = Object.keys;
  const hasOwn = Object.hasOwn;
  let open: Record<string, string> = {};
  let tracking = false;
  return {
    track() {
      if (tracking || !setEnabled) return;
      setEnabled(true);
      tracking = true;
    },
    untracked<T>(start: () => T): T {
      if (!tracking || !setEnabled) return start();
      setEnabled(false);
      try {
        return start();
      } finally {
        setEnabled(true);
      }
    },
    snapshot() {
      open = resources ? resources() : {};
    },
    pending(): boolean {
      if (!tracking || !allTraces || !resources || !isEnabled) return true;
      try {
        // A guest cannot have turned it off for good: it would miss what it started after.
        if (!isEnabled()) return true;
        // A map keyed by kind (op, timer, interval): empty when nothing is pending.
        if (sizeOf(allTraces()) !== 0) return true;
        const now = resources();
        const rids = ownKeys(now);
        for (let i = 0; i < rids.length; i++) {
          if (!hasOwn(open, rids[i]) || open[rids[i]] !== now[rids[i]]) return true;
        }
        return false;
      } catch {
        return true;
      }
    },
  };
}
