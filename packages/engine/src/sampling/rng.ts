/**
 * Seeded pseudo-random numbers: xoshiro128** seeded through splitmix32, so the same seed gives
 * the same sequence on every platform. Not for cryptography.
 */

export interface Rng {
  /** Uniform float in [0, 1) with 32 bits of randomness. */
  next(): number;
  /** Uniform integer in [0, n) for n >= 1. */
  nextInt(n: number): number;
  /** The internal state (4 x u32), to resume a stream later. */
  state(): [number, number, number, number];
}

function splitmix32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/**
 * A generator for `seed` (any finite number; integers up to 2^53 use all their bits), or resumed
 * from a `state()` snapshot.
 */
export function createRng(seed: number | readonly [number, number, number, number]): Rng {
  let s0: number;
  let s1: number;
  let s2: number;
  let s3: number;
  if (typeof seed === "number") {
    const low = splitmix32(seed >>> 0);
    const high = splitmix32((Math.floor(seed / 2 ** 32) >>> 0) ^ 0x5bd1e995);
    s0 = low() ^ high();
    s1 = low();
    s2 = low() ^ high();
    s3 = low();
    if ((s0 | s1 | s2 | s3) === 0) s0 = 1;
  } else {
    [s0, s1, s2, s3] = seed.map((v) => v >>> 0) as [number, number, number, number];
  }
  const nextU32 = (): number => {
    const result = Math.imul(((Math.imul(s1, 5) << 7) | (Math.imul(s1, 5) >>> 25)) >>> 0, 9) >>> 0;
    const t = (s1 << 9) >>> 0;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= t;
    s3 = ((s3 << 11) | (s3 >>> 21)) >>> 0;
    s0 >>>= 0;
    s1 >>>= 0;
    s2 >>>= 0;
    return result;
  };
  return {
    next: () => nextU32() / 2 ** 32,
    nextInt: (n: number) => Math.floor((nextU32() / 2 ** 32) * n),
    state: () => [s0 >>> 0, s1 >>> 0, s2 >>> 0, s3 >>> 0],
  };
}
