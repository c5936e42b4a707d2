/**
 * Math.random for a QuickJS instance, seeded from the host's CSPRNG.
 *
 * QuickJS seeds its own Math.random from the clock, in milliseconds under WebAssembly: two
 * contexts made in the same millisecond (say, spares made on two worker threads at once) return
 * the same sequence. Measured: the first Math.random() of two contexts made back to back, each in
 * its own WebAssembly instance, was identical 14 times in 20. One tenant could then know another's
 * "random" values. Each instance gets a sequence of its own instead: xoshiro128** (Blackman and
 * Vigna), two 32-bit outputs to a double's 53 bits. Math.random is still not for secrets, in any
 * engine: crypto.getRandomValues is the host's CSPRNG.
 *
 * SELF-CONTAINED: stringified and evaluated in the QuickJS context, before the guest runtime.
 * Returns the function that seeds it again, which only the host holds (an instance copied from a
 * template's memory gets a sequence of its own: memory-snapshot.ts).
 */
export function installSeededRandom(g: typeof globalThis, seed: number[]): (a: number, b: number, c: number, d: number) => void {
  let a = 0;
  let b = 0;
  let c = 0;
  let d = 0;
  const reseed = (x: number, y: number, z: number, w: number) => {
    a = x | 0;
    b = y | 0;
    c = z | 0;
    d = w | 0;
    if ((a | b | c | d) === 0) a = 1; // the all-zero state is the one xoshiro cannot leave
  };
  reseed(seed[0], seed[1], seed[2], seed[3]);
  const imul = Math.imul;
  const rotl = (x: number, k: number) => (x << k) | (x >>> (32 - k));
  const next = (): number => {
    const result = imul(rotl(imul(b, 5), 7), 9);
    const t = b << 9;
    c ^= a;
    d ^= b;
    b ^= c;
    a ^= d;
    c ^= t;
    d = rotl(d, 11);
    return result >>> 0;
  };
  // A method, like the builtin: named "random", length 0, not a constructor.
  const random = {
    random(): number {
      return ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
    },
  }.random;
  Object.defineProperty(g.Math, "random", { value: random, writable: true, enumerable: false, configurable: true });
  return reseed;
}
