import { type ModelDims, SCRATCH_SCHEMA } from "@keepquant/gguf";

/**
 * The TypeScript forward's activation scratch: every buffer an op writes its result into, by name,
 * with its width per batch row as a named dimension of the model description (f32 values): the
 * description's scratch schema (gguf's SCRATCH_SCHEMA: the trunk's buffers and each kind's, which
 * tt-native's native model is generated from too). One table: the forward allocates it for
 * `maxBatchTokens` rows, `Qwen35Forward.scratchBytes` and the residency planner count it, and debug
 * taps observe these buffers after the op that wrote them.
 */
export const FORWARD_SCRATCH = {
  ...SCRATCH_SCHEMA.trunk,
  // the ops of every kind the forward implements
  ...SCRATCH_SCHEMA.mixers.attention,
  ...SCRATCH_SCHEMA.mixers.gdn,
  ...SCRATCH_SCHEMA.ffns.dense,
  ...SCRATCH_SCHEMA.ffns.moe,
};

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
