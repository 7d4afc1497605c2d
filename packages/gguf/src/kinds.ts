/**
 * The registered layer kinds: every token mixer and FFN an architecture folder brings, by name. A
 * kind is registered once here (one line per folder that brings kinds); the model description, the
 * load plan and tt-native's generated slot tables read them from here, so a new kind needs no edit
 * elsewhere in this package.
 */
import { QWEN35_FFNS, QWEN35_TOKEN_MIXERS } from "./qwen35/kinds.js";
import { QWEN35MOE_FFNS } from "./qwen35moe/kinds.js";

/** Token mixers (qwen35.md sections 4-5): gated full attention, a Gated DeltaNet, ... */
export const TOKEN_MIXERS = { ...QWEN35_TOKEN_MIXERS };
/** FFNs: dense SwiGLU (qwen35), routed experts plus a gated shared expert (qwen35moe), ... */
export const FFN_KINDS = { ...QWEN35_FFNS, ...QWEN35MOE_FFNS };

/** A registered token mixer. */
export type TokenMixer = keyof typeof TOKEN_MIXERS;
/** A registered FFN kind. */
export type FfnKind = keyof typeof FFN_KINDS;
