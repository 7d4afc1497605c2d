/**
 * nativeArgmax is greedy sampling's argmax: it must give exactly the index of a linear scan that keeps the
 * first strictly larger value from -Infinity (@keepquant/engine's `greedy`, llama_sampler_greedy's), at every
 * ISA level (the vector body and the scalar one), on ties, NaN, infinities, signed zeros and every tail length.
 */
import { afterAll, describe, expect, it } from "vitest";
import { availableNativeIsas, getNativeIsa, nativeAddon, nativeArgmax, nativeStatus, setNativeIsa } from "./index.js";
import { NativeArgumentError } from "./errors.js";

const reason = nativeAddon() ? undefined : `the CPU arm did not load: ${nativeStatus().cpu.reasons.join("; ")}`;

/** The specification: the engine's scan, written out again here. */
function scan(x: Float32Array): number {
  let best = 0;
  let bestValue = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < x.length; i++) {
    if (x[i]! > bestValue) {
      bestValue = x[i]!;
      best = i;
    }
  }
  return best;
}

/** Deterministic pseudo-random rows (xorshift32), values from a few small integers so that ties are common. */
function rows(): Float32Array[] {
  let s = 0x9e3779b9;
  const next = () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
  const out: Float32Array[] = [];
  for (const n of [0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 248_320]) {
    for (let variant = 0; variant < 4; variant++) {
      const x = new Float32Array(n);
      for (let i = 0; i < n; i++) {
        const u = next();
        // variant 0: ties among 8 values; 1: wide values; 2: with NaN and infinities; 3: zeros of both signs
        x[i] =
          variant === 0
            ? Math.floor(u * 8)
            : variant === 1
              ? (u - 0.5) * 1e6
              : variant === 2
                ? u < 0.1
                  ? Number.NaN
                  : u < 0.15
                    ? Number.NEGATIVE_INFINITY
                    : Math.floor(u * 50) - 60
                : u < 0.5
                  ? -0
                  : u < 0.9
                    ? 0
                    : -1;
      }
      out.push(x);
    }
  }
  return out;
}

const special: [string, number[]][] = [
  ["all NaN", [Number.NaN, Number.NaN, Number.NaN]],
  ["all -Infinity", [Number.NEGATIVE_INFINITY, Number.NEGATIVE_INFINITY]],
  ["NaN then -Infinity", [Number.NaN, Number.NEGATIVE_INFINITY, Number.NaN]],
  ["+Infinity late", [1, 2, 3, Number.NaN, 5, 6, 7, 8, 9, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY]],
  ["-0 before +0", [-1, -0, 0, -0]],
  ["+0 before -0", [-1, 0, -0, 0]],
  ["NaN at the maximum's place", [Number.NaN, 3, Number.NaN, 3, 2, 1, 0, -1, 3]],
  ["the last of 17", [...Array.from({ length: 16 }, () => 1), 2]],
  ["the first of 17", [2, ...Array.from({ length: 16 }, () => 2)]],
  // the vector body's running maximum must survive a NaN later in its lane (16 and 32 entries on)
  ["a unique maximum, then NaN in its lane", Array.from({ length: 48 }, (_, i) => (i === 3 ? 10 : i === 19 ? Number.NaN : 0))],
  ["largest finite float", [3.4028234663852886e38, -3.4028234663852886e38, 3.4028234663852886e38]],
];

describe.skipIf(reason !== undefined)(`nativeArgmax${reason ? ` (skipped: ${reason})` : ""}`, () => {
  const before = reason ? undefined : getNativeIsa();
  afterAll(() => {
    if (before) setNativeIsa(before);
  });

  for (const isa of reason ? [] : availableNativeIsas()) {
    it(`${isa}: the index of the engine's scan on ${rows().length} rows (ties, NaN, infinities, signed zeros, every tail)`, () => {
      setNativeIsa(isa);
      const mismatches: string[] = [];
      for (const x of rows()) {
        const want = scan(x);
        const got = nativeArgmax(x);
        if (got !== want) mismatches.push(`length ${x.length}: ${got} instead of ${want}`);
      }
      expect(mismatches).toEqual([]);
    });

    it(`${isa}: special rows`, () => {
      setNativeIsa(isa);
      for (const [name, values] of special) {
        const x = Float32Array.from(values);
        expect({ name, index: nativeArgmax(x) }).toEqual({ name, index: scan(x) });
      }
    });
  }

  it("reads a view at its own offset (a row of a batch's logits)", () => {
    const batch = new Float32Array(3 * 40).fill(-5);
    batch[40 + 17] = 9; // row 1's maximum
    batch[2 * 40 + 3] = 100; // row 2's, larger: must not be seen through row 1's view
    batch[5] = 50; // row 0's
    expect(nativeArgmax(batch.subarray(40, 80))).toBe(17);
    expect(nativeArgmax(batch.subarray(0, 40))).toBe(5);
    expect(nativeArgmax(batch)).toBe(83);
  });

  it("refuses what is not a Float32Array with a typed error", () => {
    expect(() => nativeArgmax(new Float64Array(4) as unknown as Float32Array)).toThrow(NativeArgumentError);
    expect(() => nativeArgmax([1, 2] as unknown as Float32Array)).toThrow(/nativeArgmax: invalid argument x/);
  });
});
