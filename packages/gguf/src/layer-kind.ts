/**
 * What an architecture folder declares about each layer kind it brings: the op family that runs it
 * (the engine's TS forward and tt-native's native model dispatch on the family, not on the kind's
 * name, so a new kind of an existing family needs no edit there), its tensors as templates, the
 * activation scratch it writes beyond its family's, and how errors name it.
 */
import type { ModelDimName, TensorTemplate } from "./qwen35/tensors.js";

/** The token mixer ops both forwards implement: full causal attention, the Gated DeltaNet. */
export const MIXER_OPS = ["attention", "gdn"] as const;
export type MixerOp = (typeof MIXER_OPS)[number];
/** The FFN ops both forwards implement: the dense SwiGLU, routed experts with a gated shared expert. */
export const FFN_OPS = ["dense", "moe"] as const;
export type FfnOp = (typeof FFN_OPS)[number];

/** A kind's activation scratch per batch row: buffer name -> its width as a named dimension. */
export type KindScratch = Readonly<Record<string, ModelDimName>>;

/** A token mixer kind. */
export interface MixerKindSpec {
  readonly op: MixerOp;
  /** An attention with an output gate: attn_q rows per head [q_h | gate_h] (qDim = 2 H Dh), the output times sigmoid(gate). */
  readonly gated: boolean;
  /** How errors name a layer of this kind ("a full-attention MoE layer has no ssm_norm"). */
  readonly title: string;
  /** Its tensors in file order. */
  readonly tensors: readonly TensorTemplate[];
  readonly scratch: KindScratch;
}

/** An FFN kind. */
export interface FfnKindSpec {
  readonly op: FfnOp;
  /** How errors name it after the mixer's title ("MoE"; empty for the dense FFN). */
  readonly title: string;
  readonly tensors: readonly TensorTemplate[];
  readonly scratch: KindScratch;
}

/** The kinds one architecture folder brings (its `kinds.ts`), registered with the folder. */
export interface ArchitectureKinds {
  readonly mixers: Readonly<Record<string, MixerKindSpec>>;
  readonly ffns: Readonly<Record<string, FfnKindSpec>>;
}
