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
 */
export function installSeededRandom(g: typeof globalThis, seed: number[]): void {
  let a = seed[0] | 0;
  let b = seed[1] | 0;
  let c = seed[2] | 0;
  let d = seed[3] | 0;
  if ((a | b | c | d) === 0) a = 1; // the all-zero state is the one xoshiro cannot leave
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
}
