/**
 * The activation quantizers (from_float) of every ISA level give the generic level's bytes, for ordinary
 * activations and for the inputs that take the unusual paths: all-zero blocks, exact rounding ties, signed
 * zeros, NaN, infinities, values past 2^31 after scaling, and blocks of tiny values whose inverse scale
 * overflows (Q8_K's codes then wrap as the scalar int8 conversion does). The generic level is the scalar code
 * that llama.test.ts holds byte-exact against llama.cpp's haswell quantizers on ordinary inputs.
 */
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { afterAll, describe, expect, it } from "vitest";
import { availableNativeIsas, nativeAddon, setNativeIsa } from "./index.js";
import { randomFloats } from "./test-support.js";

const addon = nativeAddon();
const reason = addon ? undefined : "the native addon is not built";

afterAll(() => {
  if (addon) setNativeIsa("best");
});

/** 16 blocks of 256 values, each block stressing one path (a K-quant block is 8 Q8_0 blocks). */
function stressInput(): Float32Array {
  const x = randomFloats(16 * 256, 91, 3);
  const block = (b: number) => x.subarray(b * 256, (b + 1) * 256);
  block(1).fill(0); // all zero
  block(2).fill(-0); // all negative zero
  // exact ties of x * (127 / amax): amax 127 makes the codes x itself
  block(3).forEach((_, j, a) => {
    a[j] = j % 32 === 0 ? 127 : ((j % 16) - 8 + 0.5) * (j % 3 === 0 ? -1 : 1);
  });
  block(4)[5] = Number.NaN; // NaN among ordinary values
  block(4)[200] = -Number.NaN;
  block(5)[17] = Number.POSITIVE_INFINITY; // an infinite maximum: codes of 0 * inf
  block(5)[100] = Number.NEGATIVE_INFINITY;
  block(6).fill(1e-40); // denormal: 127 / amax overflows to infinity
  block(6)[3] = -2e-40;
  block(7).fill(3e38); // huge values
  block(7)[9] = -3.4e38;
  // the same |maximum| with both signs: the first one's sign decides Q8_K's scale
  block(8)[40] = -50;
  block(8)[41] = 50;
  block(9)[250] = 50;
  block(9)[7] = -50;
  block(10).fill(Number.NaN); // every value NaN: amax 0
  block(11).forEach((_, j, a) => {
    a[j] = j % 2 === 0 ? 1e-30 : -1e-30; // tiny
  });
  block(12)[0] = 2 ** 31; // a code past the int32 range after scaling (with a small amax elsewhere)
  return x;
}

describe.skipIf(reason !== undefined)(`activation quantizers at every ISA level${reason ? ` (skipped: ${reason})` : ""}`, () => {
  const inputs: [string, Float32Array][] = [
    ["ordinary", randomFloats(8 * 256, 17, 2)],
    ["stress", stressInput()],
  ];
  for (const act of [GgmlType.Q8_K, GgmlType.Q8_0, GgmlType.Q8_1]) {
    const { name, blockSize, typeSize } = GGML_TYPE_TRAITS[act];
    for (const [label, x] of inputs) {
      it(`${name}, ${label} inputs: the bytes of the generic level`, () => {
        const bytes = (x.length / blockSize) * typeSize;
        setNativeIsa("generic");
        const generic = new Uint8Array(bytes);
        addon!.quantizeActivations(act, x, generic, 1);
        for (const isa of availableNativeIsas()) {
          setNativeIsa(isa);
          const got = new Uint8Array(bytes).fill(0xa5);
          addon!.quantizeActivations(act, x, got, 1);
          let first = -1;
          for (let i = 0; i < bytes && first < 0; i++) if (got[i] !== generic[i]) first = i;
          expect(first, `${name} ${isa}: first differing byte (block ${Math.floor(first / typeSize)})`).toBe(-1);
        }
      });
    }
  }
});
