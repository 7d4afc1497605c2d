/**
 * The tensors of a qwen3vl_merger projector, with shapes as ggml stores them (ne, ne0 contiguous):
 * clip-impl.h's TN_* names, the tensors clip.cpp loads for PROJECTOR_TYPE_QWEN3VL and the ones its
 * qwen3vl graph reads. Symbols: h = embedding_length, f = feed_forward_length, p = patch_size,
 * P = (image_size / p)^2, m = h * spatial_merge^2 (one merged token), o = projection_dim.
 *
 *   v.patch_embd.weight, .weight.1   [p, p, 3, h]  the Conv3D kernel split along time (two Conv2Ds)
 *   v.patch_embd.bias                [h]
 *   v.position_embd.weight           [h, P]        learned positions, resized to the image's grid
 *   v.pre_ln.weight/.bias            [h]           optional (read when present; Qwen3.5 files have none)
 *   v.blk.N.ln1 / ln2 .weight/.bias  [h]
 *   v.blk.N.attn_qkv.weight / .bias  [h, 3h] / [3h]  fused Q, K, V
 *   v.blk.N.attn_out.weight / .bias  [h, h] / [h]
 *   v.blk.N.ffn_up.weight / .bias    [h, f] / [f]    no ffn_gate: linear_fc1 -> gelu -> linear_fc2
 *   v.blk.N.ffn_down.weight / .bias  [f, h] / [h]
 *   v.post_ln.weight/.bias           [h]           the merger's norm (before the 2 x 2 merge)
 *   mm.0.weight / .bias              [m, m] / [m]
 *   mm.2.weight / .bias              [m, o] / [o]
 *   v.deepstack.N.norm .weight/.bias [m]           deepstack blocks only: norm after the merge,
 *   v.deepstack.N.fc1.weight / .bias [m, m] / [m]  then an MLP like mm.0 / mm.2
 *   v.deepstack.N.fc2.weight / .bias [m, o] / [o]
 */
import type { ProjectorConfig } from "./config.js";

/** How a tensor is read: a matmul weight (any ggml type), the patch convolution or the position table (F32 or F16), a vector (F32). */
export type ProjectorTensorKind = "matmul" | "conv" | "table" | "vector";
/** Where in the projector a tensor sits. */
export type ProjectorTensorStage = "embed" | "block" | "merger" | "deepstack";

export interface ProjectorExpectedTensor {
  name: string;
  /** ggml ne (ne0 contiguous). */
  ne: number[];
  /** The name without `v.blk.N.` / `v.deepstack.N.` (e.g. `attn_qkv.weight`, `deepstack.fc1.weight`). */
  slot: string;
  /** The ViT block (blocks and deepstack mergers). */
  layer?: number;
  kind: ProjectorTensorKind;
  stage: ProjectorTensorStage;
  /** llama.cpp reads it when present and does without it otherwise. */
  optional?: boolean;
}

/** The projector as data: its tensors, which blocks have a deepstack merger, and the output width. */
export interface ProjectorDescription {
  config: ProjectorConfig;
  /** Blocks with a deepstack merger, ascending. */
  deepstackLayers: number[];
  /** One merged token's width: hidden * merge^2. */
  mergedWidth: number;
  /** Width of one output embedding: projection_dim * (1 + deepstack mergers) (llama.cpp's n_mmproj_embd). */
  outputWidth: number;
  tensors: ProjectorExpectedTensor[];
}

/**
 * The expected tensors of a projector. `deepstackLayers` overrides the config's (when the file has no
 * `clip.vision.is_deepstack_layers`, the load plan passes the blocks whose deepstack tensors it found).
 */
export function describeProjector(
  config: ProjectorConfig,
  deepstackLayers: readonly number[] = config.deepstackLayers ?? [],
): ProjectorDescription {
  const h = config.hiddenSize;
  const f = config.feedForwardLength;
  const p = config.patchSize;
  const m = config.mergedWidth;
  const o = config.projectionDim;
  const tensors: ProjectorExpectedTensor[] = [];
  const add = (
    name: string,
    ne: number[],
    kind: ProjectorTensorKind,
    stage: ProjectorTensorStage,
    extra: Partial<ProjectorExpectedTensor> = {},
  ) => {
    const slot = name.replace(/^v\.blk\.\d+\./, "").replace(/^v\.deepstack\.\d+\./, "deepstack.");
    tensors.push({ name, ne, slot, kind, stage, ...extra });
  };

  add("v.patch_embd.weight", [p, p, 3, h], "conv", "embed");
  add("v.patch_embd.weight.1", [p, p, 3, h], "conv", "embed");
  add("v.patch_embd.bias", [h], "vector", "embed");
  add("v.position_embd.weight", [h, config.positionCount], "table", "embed");
  add("v.pre_ln.weight", [h], "vector", "embed", { optional: true });
  add("v.pre_ln.bias", [h], "vector", "embed", { optional: true });
  for (let il = 0; il < config.blockCount; il++) {
    const b = `v.blk.${il}.`;
    const layer = { layer: il };
    add(`${b}ln1.weight`, [h], "vector", "block", layer);
    add(`${b}ln1.bias`, [h], "vector", "block", layer);
    add(`${b}attn_qkv.weight`, [h, 3 * h], "matmul", "block", layer);
    add(`${b}attn_qkv.bias`, [3 * h], "vector", "block", layer);
    add(`${b}attn_out.weight`, [h, h], "matmul", "block", layer);
    add(`${b}attn_out.bias`, [h], "vector", "block", layer);
    add(`${b}ln2.weight`, [h], "vector", "block", layer);
    add(`${b}ln2.bias`, [h], "vector", "block", layer);
    add(`${b}ffn_up.weight`, [h, f], "matmul", "block", layer);
    add(`${b}ffn_up.bias`, [f], "vector", "block", layer);
    add(`${b}ffn_down.weight`, [f, h], "matmul", "block", layer);
    add(`${b}ffn_down.bias`, [h], "vector", "block", layer);
  }
  add("v.post_ln.weight", [h], "vector", "merger");
  add("v.post_ln.bias", [h], "vector", "merger");
  add("mm.0.weight", [m, m], "matmul", "merger");
  add("mm.0.bias", [m], "vector", "merger");
  add("mm.2.weight", [m, o], "matmul", "merger");
  add("mm.2.bias", [o], "vector", "merger");
  const deepstack = [...deepstackLayers].sort((a, b) => a - b);
  for (const il of deepstack) {
    const d = `v.deepstack.${il}.`;
    const layer = { layer: il };
    add(`${d}norm.weight`, [m], "vector", "deepstack", layer);
    add(`${d}norm.bias`, [m], "vector", "deepstack", layer);
    add(`${d}fc1.weight`, [m, m], "matmul", "deepstack", layer);
    add(`${d}fc1.bias`, [m], "vector", "deepstack", layer);
    add(`${d}fc2.weight`, [m, o], "matmul", "deepstack", layer);
    add(`${d}fc2.bias`, [o], "vector", "deepstack", layer);
  }
  return { config, deepstackLayers: deepstack, mergedWidth: m, outputWidth: o * (1 + deepstack.length), tensors };
}
