/**
 * The guest realm's random bytes, drawn from the host's CSPRNG a block at a time. Each draw is a
 * crossing to the host (on v8 a synchronous one, ~60-110 µs of the machine's CPU here, charged 50
 * µs to the guest: host-time.ts), so `crypto.randomUUID()` drawing 16 bytes a call cost a
 * crossing each; now one in 256 does. Node does the same for its own randomUUID (a cache of 128).
 *
 * The block lives in this closure, out of the guest's reach, and each byte is zeroed as it is
 * handed out. Requests larger than a sixteenth of a block go straight to the host. An instance
 * whose memory is copied (QuickJS's template, memory-snapshot.ts) calls `drain`, so no two
 * instances hand out the same bytes.
 *
 * SELF-CONTAINED: stringified into the guest realm (bundle.ts), run before any guest code.
 */
export function createRandomPool(
  draw: (n: number) => Uint8Array,
  blockBytes: number,
): { take(n: number): Uint8Array; drain(): void } {
  const Bytes = Uint8Array;
  const largest = blockBytes >> 4;
  let block: Uint8Array | undefined;
  let used = 0;
  return {
    take(n) {
      if (n > largest) return draw(n);
      // `blockBytes`, not `block.length`: the length getter is the guest's to redefine.
      if (block === undefined || used + n > blockBytes) {
        block = draw(blockBytes);
        used = 0;
      }
      const out = new Bytes(n);
      for (let i = 0; i < n; i++) {
        out[i] = block[used + i];
        block[used + i] = 0;
      }
      used += n;
      return out;
    },
    drain() {
      block = undefined;
      used = 0;
    },
  };
}
