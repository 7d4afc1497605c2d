/**
 * The native model's layer kinds and tensor slots, generated from the model description's tensor
 * schema (@keepquant/gguf's MODEL_TENSOR_SCHEMA and LAYER_KINDS): src/model/model_kinds.h (a layer's
 * token mixer and FFN as enums, with their names, titles, op families and flags), src/model/model_slots.h (each scope's and kind's slots, bound to
 * the native model's fields) and src/model/model_scratch.h (the layer loop's activation scratch per kind,
 * from SCRATCH_SCHEMA). `pnpm --filter @keepquant/tt-native gen:model` writes them; a test fails
 * when they are stale.
 */
import {
  FFN_OPS,
  type FfnKind,
  LAYER_KINDS,
  MIXER_OPS,
  MODEL_DIM_SCHEMA,
  MODEL_TENSOR_SCHEMA,
  type ModelDimName,
  SCRATCH_SCHEMA,
  type TensorTemplate,
  type TokenMixer,
} from "@keepquant/gguf";

const pascal = (name: string): string => name.replace(/(^|[_-])([a-z])/g, (_, __, c: string) => c.toUpperCase());
const quoted = (names: readonly string[]): string => names.map((n) => JSON.stringify(n)).join(", ");

/** The token mixers and FFNs in the order of their C++ enums. */
export const MIXER_KINDS = Object.keys(MODEL_TENSOR_SCHEMA.mixers) as TokenMixer[];
export const FFN_KINDS = Object.keys(MODEL_TENSOR_SCHEMA.ffns) as FfnKind[];

const enumOf = (name: string, values: readonly string[]): string =>
  `enum class ${name} { ${values.map((k, i) => `${pascal(k)} = ${i}`).join(", ")} };`;

/**
 * The layer kinds' header (src/model/model_kinds.h): each kind's name, its title in errors (an FFN's
 * after the mixer's: "a full-attention MoE layer has no ssm_norm"), the op family the native layer
 * loop runs it with, and the attention's gate flag. A new kind of an existing family changes this
 * header only.
 */
export function renderModelKindsHeader(): string {
  const mixers = MIXER_KINDS.map((k) => LAYER_KINDS.mixers[k]);
  const ffns = FFN_KINDS.map((k) => LAYER_KINDS.ffns[k]);
  const lines = [
    "// Generated from @keepquant/gguf's MODEL_TENSOR_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.",
    "// A layer's kinds: its token mixer and its FFN, as the model description names them, and the op families",
    "// (gguf's MIXER_OPS, FFN_OPS) the native model runs them with.",
    "#pragma once",
    "",
    "namespace kq {",
    "",
    enumOf("Mixer", MIXER_KINDS),
    enumOf("Ffn", FFN_KINDS),
    enumOf("MixerOp", MIXER_OPS),
    enumOf("FfnOp", FFN_OPS),
    "",
    "namespace kinds {",
    "",
    `constexpr int kMixerCount = ${MIXER_KINDS.length};`,
    `inline constexpr const char* kMixerNames[kMixerCount] = {${quoted(MIXER_KINDS)}};`,
    `inline constexpr const char* kMixerTitles[kMixerCount] = {${quoted(mixers.map((k) => k.title))}};`,
    `inline constexpr MixerOp kMixerOps[kMixerCount] = {${mixers.map((k) => `MixerOp::${pascal(k.op)}`).join(", ")}};`,
    `inline constexpr bool kMixerGated[kMixerCount] = {${mixers.map((k) => String(k.gated)).join(", ")}};`,
    `constexpr int kFfnCount = ${FFN_KINDS.length};`,
    `inline constexpr const char* kFfnNames[kFfnCount] = {${quoted(FFN_KINDS)}};`,
    `inline constexpr const char* kFfnTitles[kFfnCount] = {${quoted(ffns.map((k) => (k.title ? ` ${k.title}` : "")))}};`,
    `inline constexpr FfnOp kFfnOps[kFfnCount] = {${ffns.map((k) => `FfnOp::${pascal(k.op)}`).join(", ")}};`,
    "",
    "// The op family of a layer's kinds, and whether its attention has the output gate.",
    "constexpr MixerOp mixerOp(Mixer m) { return kMixerOps[(int)m]; }",
    "constexpr bool mixerGated(Mixer m) { return kMixerGated[(int)m]; }",
    "constexpr FfnOp ffnOp(Ffn f) { return kFfnOps[(int)f]; }",
    "",
    "}  // namespace kinds",
    "}  // namespace kq",
    "",
  ];
  return lines.join("\n");
}

/**
 * One slot as the native table binds it. A slot with a fallback is required natively: the caller
 * binds the fallback's tensor (a tied head, the drafter's shared head). An f32 vector is a 1-D
 * tensor or one stored F32 by rule (the engine's isVectorTensor); everything else stays packed.
 */
function slotEntry(t: TensorTemplate, scope: string): string {
  const need = t.requiredUnless ? "Need::Unless" : t.optional && !t.fallback ? "Need::Optional" : "Need::Required";
  const unless = t.requiredUnless ? JSON.stringify(t.requiredUnless) : "nullptr";
  const member = `&${scope}::${t.field.split(".").at(-1)}`;
  const vector = t.dims.length < 2 || t.requiresF32 === true;
  return `    {"${t.slot}", ${need}, ${unless}, ${vector ? "nullptr" : member}, ${vector ? member : "nullptr"}},`;
}

function slotArray(name: string, scope: string, templates: readonly TensorTemplate[]): string[] {
  return [`inline const Slot<${scope}> ${name}[] = {`, ...templates.map((t) => slotEntry(t, scope)), "};"];
}

/** The slots' header (src/model/model_slots.h): included by model_table.cc only. */
export function renderModelSlotsHeader(): string {
  const schema = MODEL_TENSOR_SCHEMA;
  const kindArrays = (prefix: string, kinds: readonly string[], table: Record<string, readonly TensorTemplate[]>) => [
    ...kinds.flatMap((k) => [...slotArray(`${prefix}${pascal(k)}`, "LayerWeights", table[k]!), ""]),
  ];
  const list = (prefix: string, kinds: readonly string[], table: Record<string, readonly TensorTemplate[]>) =>
    kinds.map((k) => `{${prefix}${pascal(k)}, ${table[k]!.length}}`).join(", ");
  const lines = [
    "// Generated from @keepquant/gguf's MODEL_TENSOR_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.",
    "// Each scope's tensor slots (the globals, each token mixer's, each FFN's, the MTP block's own),",
    "// bound to the native model's fields: a matrix stays packed, a vector is f32. A slot with a fallback in the",
    "// description (a tied head, the drafter's shared head and its norm) is required: the caller binds the fallback.",
    "#pragma once",
    "",
    '#include "model/model.h"',
    "",
    "namespace kq::slots {",
    "",
    "// Required; optional; or required unless the layer binds the slot named `unless` instead.",
    "enum class Need { Required, Optional, Unless };",
    "",
    "template <typename S>",
    "struct Slot {",
    "  const char* name;",
    "  Need need;",
    "  const char* unless;",
    "  WeightMatrix S::*matrix;",
    "  const float* S::*vector;",
    "};",
    "",
    "// The slots of one kind.",
    "template <typename S>",
    "struct Slots {",
    "  const Slot<S>* first;",
    "  int count;",
    "  const Slot<S>* begin() const { return first; }",
    "  const Slot<S>* end() const { return first + count; }",
    "};",
    "",
    ...slotArray("kGlobal", "ModelSpec", schema.global),
    "",
    ...kindArrays("kMixer", MIXER_KINDS, schema.mixers),
    `inline const Slots<LayerWeights> kMixers[kinds::kMixerCount] = {${list("kMixer", MIXER_KINDS, schema.mixers)}};`,
    "",
    ...kindArrays("kFfn", FFN_KINDS, schema.ffns),
    `inline const Slots<LayerWeights> kFfns[kinds::kFfnCount] = {${list("kFfn", FFN_KINDS, schema.ffns)}};`,
    "",
    "// The MTP block's own tensors (its attention block and FFN are layer slots of drafter.block).",
    ...slotArray("kNextn", "DrafterWeights", schema.nextn),
    "",
    "}  // namespace kq::slots",
    "",
  ];
  return lines.join("\n");
}

/** `X(buffer, width)` for each buffer of one scratch table: its width as the ModelHparams member of its dimension. */
function scratchMacro(name: string, buffers: Readonly<Record<string, ModelDimName>>): string {
  const items = Object.entries(buffers).map(([buffer, dim]) => ` X(${buffer}, ${MODEL_DIM_SCHEMA[dim].native})`);
  return `#define ${name}(X)${items.join("")}`;
}

/**
 * The scratch header (src/model/model_scratch.h): one X-macro per table, `X(buffer, width)`; the
 * model declares `buffer_` and allocates it for its maximum batch rows times `shape.width`.
 */
export function renderModelScratchHeader(): string {
  const macro = (prefix: string, kind: string) => `${prefix}_${kind.toUpperCase()}`;
  const lines = [
    "// Generated from @keepquant/gguf's SCRATCH_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.",
    "// The layer loop's activation scratch per batch row: X(buffer, ModelHparams member holding its width), for the",
    "// trunk and for each registered kind (the TypeScript forward allocates the same buffers).",
    "#pragma once",
    "",
    scratchMacro("KQ_SCRATCH_TRUNK", SCRATCH_SCHEMA.trunk),
    ...MIXER_KINDS.map((k) => scratchMacro(macro("KQ_SCRATCH_MIXER", k), SCRATCH_SCHEMA.mixers[k])),
    ...FFN_KINDS.map((k) => scratchMacro(macro("KQ_SCRATCH_FFN", k), SCRATCH_SCHEMA.ffns[k])),
    "",
  ];
  return lines.join("\n");
}
