import { GGML_TYPE_TRAITS, GGML_TYPES, type GgmlType, ggmlTypeLabel } from "@keepquant/gguf";
import { loadGgmlCpuOracle, oracleUnavailableReason } from "@keepquant/oracle";
import { KEEPQUANT_ENCODINGS, LLAMA_WEIGHT_TYPES } from "@keepquant/quant";
import { afterAll, describe, expect, it } from "vitest";
import {
  availableNativeIsas,
  getNativeIsa,
  nativeAddon,
  nativeSupportedTypes,
  nativeVecDotType,
  NATIVE_DEQUANTIZE_TYPES,
  NATIVE_LLAMA_TYPES,
  setNativeIsa,
} from "./index.js";

// The addon's per-type table (src/core/common.h) and kernel tables (one per ISA level) against
// gguf's GGML_TYPE_TRAITS: the two languages' tables must say the same thing.
const ORACLE_REASON = oracleUnavailableReason();

describe("the addon's type table", () => {
  const initialIsa = getNativeIsa();
  afterAll(() => setNativeIsa(initialIsa));
  const reported = nativeSupportedTypes();

  it("reports every type it knows, ascending, with gguf's geometry, vecDotType and registered flag", () => {
    expect(reported.length).toBeGreaterThan(0);
    expect(reported.map((t) => t.type)).toEqual([...reported.map((t) => t.type)].sort((a, b) => a - b));
    for (const t of reported) {
      const ts = GGML_TYPE_TRAITS[t.type];
      expect(ts, `type ${t.type}`).toBeDefined();
      expect({ name: t.name, blockSize: t.blockSize, typeSize: t.typeSize, vecDotType: t.vecDotType, registered: t.registered }).toEqual({
        name: ts.name,
        blockSize: ts.blockSize,
        typeSize: ts.typeSize,
        vecDotType: ts.vecDotType ?? -1,
        registered: ts.keepQuantRegistered,
      });
    }
    // the contract's encodings are all in the addon's table
    for (const e of KEEPQUANT_ENCODINGS) expect(reported.find((t) => t.type === e)?.registered, ggmlTypeLabel(e)).toBe(true);
  });

  it("vecDotType(type) is the table's vec_dot_type for every type with a dot kernel, -1 for every other id", () => {
    const addon = nativeAddon()!;
    for (const t of [...GGML_TYPES, 4, 5, 43, 1000]) {
      const entry = reported.find((r) => r.type === t);
      const expected = entry?.vecDot ? GGML_TYPE_TRAITS[t as GgmlType].vecDotType : -1;
      expect(addon.vecDotType(t as GgmlType), `type ${t}`).toBe(expected);
      if (entry?.vecDot) expect(nativeVecDotType(t as GgmlType)).toBe(expected);
    }
  });

  it("the exported lists are what the addon reports: NATIVE_LLAMA_TYPES the dot kernels, NATIVE_DEQUANTIZE_TYPES the decoders", () => {
    expect([...NATIVE_LLAMA_TYPES]).toEqual(reported.filter((t) => t.vecDot).map((t) => t.type));
    expect([...NATIVE_DEQUANTIZE_TYPES]).toEqual(reported.filter((t) => t.dequantize).map((t) => t.type));
    expect(Object.isFrozen(NATIVE_LLAMA_TYPES)).toBe(true);
    expect(NATIVE_LLAMA_TYPES.length).toBe(NATIVE_LLAMA_TYPES.map((t) => t).length);
    // the native arm and the TS reference of llama numerics have dot kernels for the same weight types
    expect([...NATIVE_LLAMA_TYPES]).toEqual([...LLAMA_WEIGHT_TYPES]);
    // the activation encodings are exactly the dot kernels' vec_dot_types
    const acts = new Set(NATIVE_LLAMA_TYPES.map((t) => GGML_TYPE_TRAITS[t].vecDotType));
    expect(reported.filter((t) => t.activation).map((t) => t.type)).toEqual([...acts].sort((a, b) => a! - b!));
  });

  it("every kernel level has kernels for the same types", () => {
    const strip = (list: readonly { type: number; dequantize: boolean; vecDot: boolean; activation: boolean }[]) =>
      list.map(({ type, dequantize, vecDot, activation }) => ({ type, dequantize, vecDot, activation }));
    for (const isa of availableNativeIsas()) {
      setNativeIsa(isa);
      expect(strip(nativeAddon()!.supportedTypes()), isa).toEqual(strip(reported));
    }
  });

  it.skipIf(ORACLE_REASON)(
    "gguf's vecDotType is ggml-cpu's vec_dot_type (type_traits_cpu of the oracle) for every type that has one",
    () => {
      const oracle = loadGgmlCpuOracle();
      for (const t of GGML_TYPES) {
        const act = GGML_TYPE_TRAITS[t].vecDotType;
        if (act !== undefined) expect(oracle.vecDotType(t), ggmlTypeLabel(t)).toBe(act);
      }
    },
  );
});
