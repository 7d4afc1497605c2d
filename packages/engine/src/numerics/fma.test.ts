import * as native from "@keepquant/tt-native";
import { describe, expect, it } from "vitest";
import { seededRandom } from "../testing/random-weights.js";
import { fmaf } from "./fma.js";

const reason = native.nativeAddon() ? undefined : `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;
const fround = Math.fround;

describe.skipIf(reason !== undefined)("fmaf (single rounding) against the C library's fmaf", () => {
  const c = reason ? undefined : native.nativeLibm();

  it("rounds once where f64-then-f32 would round twice", () => {
    // 1 + 2^-23 + (2^-24 - 2^-70): the f64 sum is the f32 midpoint 1 + 2^-23 + 2^-24 (ties-to-even
    // would go up); the exact sum lies below it, so the f32 result is 1 + 2^-23
    const a = fround(1 + 2 ** -23);
    const b = fround(2 ** -24 * (1 - 2 ** -23));
    const addend = fround(1 + 2 ** -23);
    expect(fround(a * b + addend)).toBe(fround(1 + 2 ** -22));
    expect(fmaf(a, b, addend)).toBe(fround(1 + 2 ** -23));
    expect(fmaf(a, b, addend)).toBe(c!.fmaf(a, b, addend));
    expect(fmaf(-a, b, -addend)).toBe(-fround(1 + 2 ** -23));
  });

  it("equals C fmaf bit for bit on 200,000 random triples across magnitudes (normal, subnormal, cancelling)", () => {
    const random = seededRandom(7);
    const value = () => {
      const e = Math.floor(random() * 80) - 40;
      return fround((random() * 2 - 1) * 2 ** e);
    };
    let mismatches = 0;
    for (let i = 0; i < 200_000; i++) {
      const a = value();
      const b = i % 5 === 0 ? fround(value() * 2 ** -100) : value();
      // sometimes cancel the product almost exactly, sometimes tiny addends near f32's subnormal range
      const addend = i % 7 === 0 ? fround(-a * b) : i % 11 === 0 ? fround(value() * 2 ** -110) : value();
      const want = c!.fmaf(a, b, addend);
      const got = fmaf(a, b, addend);
      if (!Object.is(got, want) && !(Number.isNaN(got) && Number.isNaN(want))) mismatches++;
    }
    expect(mismatches).toBe(0);
  });
});
