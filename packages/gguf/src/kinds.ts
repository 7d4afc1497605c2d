/**
 * The registered layer kinds: every token mixer and FFN the registered architecture folders bring
 * (each folder's `kinds`, registered with the folder in ./architectures.ts), by name, in registry
 * order. The tables here are derived from the registry, so a new folder adds nothing to this file;
 * the load plan and tt-native's generated tables read them from here.
 *
 * (Import order: this module imports the registry, which imports the folders; a folder reads its own
 * kinds, never these tables, at module evaluation.)
 */
import { ARCHITECTURES } from "./architectures.js";
import type { FfnKindSpec, FfnOp, MixerKindSpec, MixerOp } from "./layer-kind.js";
import { GLOBAL_TENSORS, type ModelDimName, NEXTN_TENSORS, type TensorTemplate } from "./qwen35/tensors.js";

type RegisteredKinds = (typeof ARCHITECTURES)[keyof typeof ARCHITECTURES]["kinds"];
type Merged<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
type AllMixers = Merged<RegisteredKinds["mixers"]>;
type AllFfns = Merged<RegisteredKinds["ffns"]>;

/** A registered token mixer. */
export type TokenMixer = keyof AllMixers & string;
/** A registered FFN kind. */
export type FfnKind = keyof AllFfns & string;
/** What a registered token mixer's folder declares about it. */
export type MixerSpecOf<K extends TokenMixer> = AllMixers[K];
/** What a registered FFN kind's folder declares about it. */
export type FfnSpecOf<K extends FfnKind> = AllFfns[K];
/** The registered token mixers an op family runs (e.g. every attention kind). */
export type MixerOfOp<O extends MixerOp> = { [K in TokenMixer]: MixerSpecOf<K>["op"] extends O ? K : never }[TokenMixer];
/** The registered FFN kinds an op family runs. */
export type FfnOfOp<O extends FfnOp> = { [K in FfnKind]: FfnSpecOf<K>["op"] extends O ? K : never }[FfnKind];

function collect<S>(scope: "mixers" | "ffns"): Record<string, S> {
  const table: Record<string, S> = {};
  for (const architecture of Object.values(ARCHITECTURES)) {
    for (const [name, spec] of Object.entries(architecture.kinds[scope] as Record<string, S>)) {
      if (Object.hasOwn(table, name)) throw new Error(`layer kind "${name}" is registered twice (again by ${architecture.name})`);
      table[name] = spec;
    }
  }
  return table;
}

/** Every registered kind as its folder declares it: op family, flags, title, tensors, scratch. */
export const LAYER_KINDS = {
  mixers: collect<MixerKindSpec>("mixers") as { readonly [K in TokenMixer]: MixerSpecOf<K> },
  ffns: collect<FfnKindSpec>("ffns") as { readonly [K in FfnKind]: FfnSpecOf<K> },
} as const;

const mapKinds = <T, R>(table: Readonly<Record<string, T>>, f: (spec: T) => R): Record<string, R> =>
  Object.fromEntries(Object.entries(table).map(([name, spec]) => [name, f(spec)]));

/** Token mixers (qwen35.md sections 4-5) as their tensor templates: gated full attention, a Gated DeltaNet, qwen3's ungated attention, ... */
export const TOKEN_MIXERS = mapKinds(LAYER_KINDS.mixers, (k) => k.tensors) as {
  readonly [K in TokenMixer]: MixerSpecOf<K>["tensors"];
};
/** FFNs as their tensor templates: dense SwiGLU (qwen35; qwen3's names its norm ffn_norm), routed experts plus a gated shared expert (qwen35moe), ... */
export const FFN_KINDS = mapKinds(LAYER_KINDS.ffns, (k) => k.tensors) as { readonly [K in FfnKind]: FfnSpecOf<K>["tensors"] };

/**
 * The activation scratch of the layer loop (per batch row, each buffer's width a named dimension):
 * the trunk's buffers (every layer: the residual stream, the current norm's output, a mixer's or the
 * FFN's output), then each registered kind's.
 */
export const SCRATCH_SCHEMA = {
  trunk: { hidden: "nEmbd", normed: "nEmbd", branch: "nEmbd" },
  mixers: mapKinds(LAYER_KINDS.mixers, (k) => k.scratch) as { readonly [K in TokenMixer]: MixerSpecOf<K>["scratch"] },
  ffns: mapKinds(LAYER_KINDS.ffns, (k) => k.scratch) as { readonly [K in FfnKind]: FfnSpecOf<K>["scratch"] },
} as const satisfies {
  trunk: Record<string, ModelDimName>;
  mixers: Record<TokenMixer, Record<string, ModelDimName>>;
  ffns: Record<FfnKind, Record<string, ModelDimName>>;
};

/**
 * The tensor slots of each scope and kind, as templates (the description instantiates them per
 * layer): the globals, each token mixer's, each FFN's, and the MTP block's own. tt-native generates
 * its native slot tables from this (src/model/model_slots.h).
 */
export const MODEL_TENSOR_SCHEMA = {
  global: GLOBAL_TENSORS,
  mixers: TOKEN_MIXERS as Readonly<Record<TokenMixer, readonly TensorTemplate[]>>,
  ffns: FFN_KINDS as Readonly<Record<FfnKind, readonly TensorTemplate[]>>,
  nextn: NEXTN_TENSORS,
} as const;
