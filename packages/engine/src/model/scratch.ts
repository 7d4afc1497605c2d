import type { ModelDimName, ModelDims } from "@keepquant/gguf";

/**
 * The TypeScript forward's activation scratch: every buffer an op writes its result into, by name,
 * with its width per batch row as a named dimension of the model description (f32 values). One
 * table: the forward allocates it for `maxBatchTokens` rows, `Qwen35Forward.scratchBytes` and the
 * residency planner count it, and debug taps observe these buffers after the op that wrote them.
 */
export const FORWARD_SCRATCH = {
  /** the residual stream */
  hidden: "nEmbd",
  /** the current norm's output (attn_norm, then the FFN norm) */
  normed: "nEmbd",
  /** a mixer's or the FFN's output, before its residual add */
  branch: "nEmbd",
  /** attn_q: per head [q_h | gate_h] */
  qg: "qDim",
  /** queries: q-normed, then roped */
  q: "attnOutDim",
  /** attn_k, then k-normed and roped */
  kRows: "kvDim",
  /** attn_v */
  vRows: "kvDim",
  /** attention output per head, then times sigmoid(gate) */
  attnOut: "attnOutDim",
  /** attn_qkv: the GDN's mixed q, k, v */
  mixed: "convDim",
  /** causal conv output, then SiLU, then L2-normed q and k in place */
  convOut: "convDim",
  /** attn_gate (z), then silu(z) */
  zRows: "valueDim",
  /** ssm_beta, then sigmoid */
  betaRows: "nHeadV",
  /** ssm_alpha, then + dt_bias, softplus, times a: the decay exponent g */
  alphaRows: "nHeadV",
  /** gated delta rule output, then the gated RMSNorm */
  gdnOut: "valueDim",
  /** ffn_gate, then swiglu */
  ffnGate: "nFf",
  /** ffn_up */
  ffnUp: "nFf",
} as const satisfies Record<string, ModelDimName>;

/** Each scratch buffer's width in f32 values per batch row: its named dimension's value. */
export function forwardScratchWidths(dims: ModelDims): Record<ForwardScratchName, number> {
  const widths = {} as Record<ForwardScratchName, number>;
  for (const name of Object.keys(FORWARD_SCRATCH) as ForwardScratchName[]) widths[name] = dims[FORWARD_SCRATCH[name]];
  return widths;
}

export type ForwardScratchName = keyof typeof FORWARD_SCRATCH;
export type ForwardScratch = Record<ForwardScratchName, Float32Array>;

/** One [rows, width] f32 buffer per entry of the table. */
export function allocateForwardScratch(dims: ModelDims, rows: number): ForwardScratch {
  const widths = forwardScratchWidths(dims);
  const scratch = {} as ForwardScratch;
  for (const name of Object.keys(widths) as ForwardScratchName[]) scratch[name] = new Float32Array(rows * widths[name]);
  return scratch;
}

/** f32 values of activation scratch per batch row (the planner's scratch = rows x this x 4 bytes). */
export function forwardScratchRowWidth(dims: ModelDims): number {
  return Object.values(forwardScratchWidths(dims)).reduce((sum, width) => sum + width, 0);
}
