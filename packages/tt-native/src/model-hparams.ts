/**
 * The native model's hyperparameters: every named dimension of the model description
 * (@keepquant/gguf's MODEL_DIM_SCHEMA, with its C++ name), then the values only the native step
 * takes. This module is their only definition: `encodeNativeHparams` writes them into one
 * Float64Array in this order, and the native side reads that array through
 * src/model/model_hparams.h, which is generated from the same table
 * (`pnpm --filter @keepquant/tt-native gen:model`; a test fails when the header is stale).
 */
import { MODEL_DIM_SCHEMA, type ModelDimName } from "@keepquant/gguf";
import { NativeArgumentError } from "./errors.js";

/** One hyperparameter as it crosses N-API: its name on both sides, its C++ type and least value. */
export interface NativeHparamField {
  /** the name in NativeModelSpec.hparams and in error messages */
  readonly name: NativeHparamName;
  /** the ModelHparams member it fills */
  readonly native: string;
  readonly type: "int" | "int64" | "float";
  /** least value (integers only) */
  readonly min: number;
}

/** The hyperparameters the native step takes beyond the description's dimensions. */
const STEP_ONLY = [
  /** rows of the drafter's head: the vocabulary, or a prefix of it (speculative.draftVocab) */
  { name: "drafterVocab", native: "drafterVocab", type: "int", min: 1 },
  /** rms_norm eps as f32 */
  { name: "eps", native: "eps", type: "float", min: 0 },
  /** powf(rope_freq_base, -2 / n_rot), computed by the caller's libm (the specification's value) */
  { name: "ropeThetaScale", native: "ropeThetaScale", type: "float", min: 0 },
] as const;

export type NativeHparamName = ModelDimName | (typeof STEP_ONLY)[number]["name"];

/** Every hyperparameter, in the order it crosses N-API. */
export const NATIVE_HPARAMS: readonly NativeHparamField[] = [
  ...(Object.keys(MODEL_DIM_SCHEMA) as ModelDimName[]).map((name) => ({ name, ...MODEL_DIM_SCHEMA[name] })),
  ...STEP_ONLY,
];

/**
 * The named hyperparameters of a native model spec. Every name is required; the type lets a caller
 * (a test) leave one out so that `createNativeModel` can say which one is missing.
 */
const OPERATION = "createNativeModel";

export type NativeHparams = Partial<Record<NativeHparamName, number>>;

/**
 * The values of `hparams` in the generated order; throws NativeArgumentError (of `createNativeModel`)
 * naming a missing or unknown hyperparameter.
 */
export function encodeNativeHparams(hparams: NativeHparams): Float64Array {
  const known = new Set<string>(NATIVE_HPARAMS.map((f) => f.name));
  for (const name of Object.keys(hparams)) {
    if (!known.has(name))
      throw new NativeArgumentError(OPERATION, `hparams.${name}`, `hparams.${name} is not a hyperparameter of the native model`);
  }
  const out = new Float64Array(NATIVE_HPARAMS.length);
  NATIVE_HPARAMS.forEach((field, i) => {
    const value = hparams[field.name];
    if (value === undefined) throw new NativeArgumentError(OPERATION, `hparams.${field.name}`, `hparams.${field.name} is missing`);
    out[i] = value;
  });
  return out;
}

const constant = (name: string): string => `k${name[0]!.toUpperCase()}${name.slice(1)}`;
const CPP_TYPE = { int: "int", int64: "int64_t", float: "float" } as const;
const KIND = { int: "Kind::Int", int64: "Kind::Int64", float: "Kind::Float" } as const;

/** The C++ header the native model reads its hyperparameters with (src/model/model_hparams.h). */
export function renderModelHparamsHeader(): string {
  const fields = NATIVE_HPARAMS;
  const member = (f: NativeHparamField, kind: NativeHparamField["type"]) => (f.type === kind ? `&ModelHparams::${f.native}` : "nullptr");
  const lines = [
    "// Generated from src/model-hparams.ts (NATIVE_HPARAMS, from @keepquant/gguf's MODEL_DIM_SCHEMA) by",
    "// scripts/gen-model.ts: do not edit.",
    "// The native model's hyperparameters, in the order they cross N-API (one Float64Array).",
    "#pragma once",
    "",
    "#include <cstdint>",
    "",
    "namespace kq {",
    "",
    "struct ModelHparams {",
    ...fields.map((f) => `  ${CPP_TYPE[f.type]} ${f.native} = 0;  // hparams.${f.name}`),
    "};",
    "",
    "namespace hparams {",
    "",
    ...fields.map((f, i) => `constexpr int ${constant(f.name)} = ${i};`),
    `constexpr int kCount = ${fields.length};`,
    "",
    "enum class Kind { Int, Int64, Float };",
    "// One value of the array: its name (hparams.<name> in errors), how it is stored, its least value.",
    "struct Field {",
    "  const char* name;",
    "  Kind kind;",
    "  int min;",
    "  int ModelHparams::*integer;",
    "  int64_t ModelHparams::*wide;",
    "  float ModelHparams::*real;",
    "};",
    "inline constexpr Field kFields[kCount] = {",
    ...fields.map(
      (f) => `    {"${f.name}", ${KIND[f.type]}, ${f.min}, ${member(f, "int")}, ${member(f, "int64")}, ${member(f, "float")}},`,
    ),
    "};",
    "",
    "}  // namespace hparams",
    "}  // namespace kq",
    "",
  ];
  return lines.join("\n");
}
