import type { Qwen35Config } from "@keepquant/gguf";

/**
 * The TypeScript forward's activation scratch: every buffer an op writes its result into, by name,
 * with its width in f32 values per batch row. One table: the forward allocates it for
 * `maxBatchTokens` rows, `Qwen35Forward.scratchBytes` and the residency planner count it, and debug
 * taps observe these buffers after the op that wrote them.
 */
export function forwardScratchWidths(config: Qwen35Config) {
  const D = config.embeddingLength;
  const hDh = config.headCount * config.headDim;
  const kvDh = config.headCountKv * config.headDim;
  const Hv = config.ssmTimeStepRank;
  return {
    /** the residual stream */
    hidden: D,
    /** the current norm's output (attn_norm, then the FFN norm) */
    normed: D,
    /** a mixer's or the FFN's output, before its residual add */
    branch: D,
    /** attn_q: per head [q_h | gate_h] */
    qg: 2 * hDh,
    /** queries: q-normed, then roped */
    q: hDh,
    /** attn_k, then k-normed and roped */
    kRows: kvDh,
    /** attn_v */
    vRows: kvDh,
    /** attention output per head, then times sigmoid(gate) */
    attnOut: hDh,
    /** attn_qkv: the GDN's mixed q, k, v */
    mixed: config.convDim,
    /** causal conv output, then SiLU, then L2-normed q and k in place */
    convOut: config.convDim,
    /** attn_gate (z), then silu(z) */
    zRows: config.valueDim,
    /** ssm_beta, then sigmoid */
    betaRows: Hv,
    /** ssm_alpha, then + dt_bias, softplus, times a: the decay exponent g */
    alphaRows: Hv,
    /** gated delta rule output, then the gated RMSNorm */
    gdnOut: config.valueDim,
    /** ffn_gate, then swiglu */
    ffnGate: config.feedForwardLength,
    /** ffn_up */
    ffnUp: config.feedForwardLength,
  };
}

export type ForwardScratchName = keyof ReturnType<typeof forwardScratchWidths>;
export type ForwardScratch = Record<ForwardScratchName, Float32Array>;

/** One [rows, width] f32 buffer per entry of the table. */
export function allocateForwardScratch(config: Qwen35Config, rows: number): ForwardScratch {
  const widths = forwardScratchWidths(config);
  const scratch = {} as ForwardScratch;
  for (const name of Object.keys(widths) as ForwardScratchName[]) scratch[name] = new Float32Array(rows * widths[name]);
  return scratch;
}

/** f32 values of activation scratch per batch row (the planner's scratch = rows x this x 4 bytes). */
export function forwardScratchRowWidth(config: Qwen35Config): number {
  return Object.values(forwardScratchWidths(config)).reduce((sum, width) => sum + width, 0);
}
