/**
 * Copies of a bootstrapped QuickJS instance's linear memory (decision 013).
 *
 * Making a QuickJS instance is mostly compiling cordon's guest runtime (48 KB of JavaScript,
 * ~10 of the ~13 ms an instance took here) in a fresh WebAssembly instance. Every instance's
 * memory is the same after that, except what the host sets per instance (limits, the random
 * seed), so a worker thread boots one template, keeps the pages where its memory differs from a
 * freshly instantiated module's, and makes each further instance by instantiating the module
 * and writing those pages over its memory.
 *
 * SELF-CONTAINED: evaluated in the QuickJS worker thread from `memorySnapshots.toString()`.
 */
export interface MemoryPages {
  /** Runs of consecutive 4 KB pages: where they go in linear memory, and their bytes. */
  runs: { offset: number; bytes: Uint8Array }[];
  /** The memory's size when the pages were taken: a memory smaller than this cannot take them. */
  byteLength: number;
}

export function memorySnapshots() {
  const PAGE = 4096;

  /** Do two pages hold the same bytes? Compared as 32-bit words (the pages are 4-byte aligned). */
  function samePage(a: Int32Array, b: Int32Array, page: number): boolean {
    const from = (page * PAGE) >> 2;
    const to = from + (PAGE >> 2);
    for (let i = from; i < to; i++) if (a[i] !== b[i]) return false;
    return true;
  }

  function zeroPage(b: Int32Array, page: number): boolean {
    const from = (page * PAGE) >> 2;
    const to = from + (PAGE >> 2);
    for (let i = from; i < to; i++) if (b[i] !== 0) return false;
    return true;
  }

  return {
    /**
     * The pages of `after` that differ from `before` (a fresh module's memory). Where `after` has
     * grown past `before`, a fresh memory of its size holds zeros: only pages with data are kept.
     */
    diff(before: ArrayBuffer, after: ArrayBuffer): MemoryPages {
      const a = new Int32Array(before, 0, Math.min(before.byteLength, after.byteLength) >> 2);
      const b = new Int32Array(after);
      const bytes = new Uint8Array(after);
      const runs: MemoryPages["runs"] = [];
      const pages = after.byteLength / PAGE;
      for (let page = 0; page < pages; page++) {
        const differs = page * PAGE >= before.byteLength ? !zeroPage(b, page) : !samePage(a, b, page);
        if (!differs) continue;
        const last = runs[runs.length - 1];
        if (last && last.offset + last.bytes.length === page * PAGE) {
          // Extend the run (its bytes are copied once, when the run ends).
          last.bytes = bytes.subarray(last.offset, (page + 1) * PAGE);
        } else runs.push({ offset: page * PAGE, bytes: bytes.subarray(page * PAGE, (page + 1) * PAGE) });
      }
      // Own copies: the template's memory is dropped once the pages are taken.
      for (const run of runs) run.bytes = run.bytes.slice();
      return { runs, byteLength: after.byteLength };
    },

    /**
     * Write the pages over a memory (that of a freshly instantiated module, as `before` was, at
     * least `pages.byteLength` long).
     */
    apply(pages: MemoryPages, memory: { buffer: ArrayBuffer }): void {
      const view = new Uint8Array(memory.buffer);
      for (const run of pages.runs) view.set(run.bytes, run.offset);
    },

    /** Are two memories byte for byte the same? (Instantiating the module must be deterministic.) */
    same(a: ArrayBuffer, b: ArrayBuffer): boolean {
      if (a.byteLength !== b.byteLength) return false;
      const x = new Int32Array(a);
      const y = new Int32Array(b);
      for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
      return true;
    },
  };
}
