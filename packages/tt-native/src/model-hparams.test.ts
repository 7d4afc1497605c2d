import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { MODEL_DIM_SCHEMA } from "@keepquant/gguf";
import { describe, expect, it } from "vitest";
import { NativeArgumentError } from "./errors.js";
import { encodeNativeHparams, NATIVE_HPARAMS, type NativeHparams, renderModelHparamsHeader } from "./model-hparams.js";

const header = path.join(path.dirname(fileURLToPath(import.meta.url)), "model", "model_hparams.h");

/** Every hyperparameter with a distinct value (its position plus one). */
function allHparams(): NativeHparams {
  return Object.fromEntries(NATIVE_HPARAMS.map((f, i) => [f.name, i + 1]));
}

describe("the native hyperparameters: one schema, a generated C++ header", () => {
  it("the committed header is what the schema generates (run `pnpm --filter @keepquant/tt-native gen:model`)", () => {
    expect(fs.readFileSync(header, "utf8")).toBe(renderModelHparamsHeader());
  });

  it("every dimension of the description crosses under its C++ name, then the step's own values", () => {
    const dims = Object.keys(MODEL_DIM_SCHEMA);
    expect(NATIVE_HPARAMS.slice(0, dims.length).map((f) => f.name)).toEqual(dims);
    expect(NATIVE_HPARAMS.slice(dims.length).map((f) => f.name)).toEqual(["drafterVocab", "eps", "ropeThetaScale"]);
    const text = renderModelHparamsHeader();
    // the description's Hv and value_dim are the native model's ssmTimeStepRank and ssmInnerSize
    expect(text).toContain("  int ssmTimeStepRank = 0;  // hparams.nHeadV");
    expect(text).toContain("  int ssmInnerSize = 0;  // hparams.valueDim");
    expect(text).toContain("  int64_t ssmStateElements = 0;  // hparams.ssmStateElements");
    expect(text).toContain("  float eps = 0;  // hparams.eps");
    NATIVE_HPARAMS.forEach((f, i) => {
      expect(text).toContain(`constexpr int k${f.name[0]!.toUpperCase()}${f.name.slice(1)} = ${i};`);
    });
    expect(text).toContain(`constexpr int kCount = ${NATIVE_HPARAMS.length};`);
  });

  it("encodes the named values in the schema's order", () => {
    const encoded = encodeNativeHparams(allHparams());
    expect(Array.from(encoded)).toEqual(NATIVE_HPARAMS.map((_, i) => i + 1));
  });

  it("names a missing or an unknown hyperparameter", () => {
    const missing = allHparams();
    delete missing.convDim;
    expect(() => encodeNativeHparams(missing)).toThrow(NativeArgumentError);
    expect(() => encodeNativeHparams(missing)).toThrow(/hparams\.convDim is missing/);
    const unknown = { ...allHparams(), nBogus: 3 } as NativeHparams;
    expect(() => encodeNativeHparams(unknown)).toThrow(/hparams\.nBogus is not a hyperparameter of the native model/);
  });
});
