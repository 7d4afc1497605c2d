/**
 * The registered layer kinds: every token mixer and FFN an architecture folder brings, by name. A
 * kind is registered once here (one line per folder that brings kinds); the model description, the
 * load plan and tt-native's generated slot tables read them from here, so a new kind needs no edit
 * elsewhere in this package.
 */
import { QWEN35_FFNS, QWEN35_SCRATCH, QWEN35_TOKEN_MIXERS } from "./qwen35/kinds.js";
import { QWEN35MOE_FFNS, QWEN35MOE_SCRATCH } from "./qwen35moe/kinds.js";
import { QWEN3_FFNS, QWEN3_SCRATCH, QWEN3_TOKEN_MIXERS } from "./qwen3/kinds.js";
import type { ModelDimName } from "./qwen35/tensors.js";

/** Token mixers (qwen35.md sections 4-5): gated full attention, a Gated DeltaNet, qwen3's ungated attention, ... */
export const TOKEN_MIXERS = { ...QWEN35_TOKEN_MIXERS, ...QWEN3_TOKEN_MIXERS };
/** FFNs: dense SwiGLU (qwen35; qwen3's names its norm ffn_norm), routed experts plus a gated shared expert (qwen35moe), ... */
export const FFN_KINDS = { ...QWEN35_FFNS, ...QWEN35MOE_FFNS, ...QWEN3_FFNS };

/** A registered token mixer. */
export type TokenMixer = keyof typeof TOKEN_MIXERS;
/** A registered FFN kind. */
export type FfnKind = keyof typeof FFN_KINDS;

/**
 * The activation scratch of the layer loop (per batch row, each buffer's width a named dimension):
 * the trunk's buffers, then each registered kind's. A kind without an entry is a compile error.
 */
export const SCRATCH_SCHEMA = {
  trunk: QWEN35_SCRATCH.trunk,
  mixers: { ...QWEN35_SCRATCH.mixers, ...QWEN3_SCRATCH.mixers },
  ffns: { ...QWEN35_SCRATCH.ffns, ...QWEN35MOE_SCRATCH.ffns, ...QWEN3_SCRATCH.ffns },
} as const satisfies {
  trunk: Record<string, ModelDimName>;
  mixers: Record<TokenMixer, Record<string, ModelDimName>>;
  ffns: Record<FfnKind, Record<string, ModelDimName>>;
};
