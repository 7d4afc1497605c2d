/**
 * Binds a `qwen3vl_merger` projector's tensors to the encoder: matrices stay packed in their GGUF
 * encoding (views of the file's bytes), vectors are decoded to f32 once. Tensor names are
 * llama.cpp's (`v.blk.{i}.attn_qkv.weight`, `mm.0.bias`, ...); which tensors a file must have was
 * checked by the projector's load plan before this runs.
 */
import { GGML_TYPE_TRAITS, GgmlType, type GgufFile, type GgufTensorInfo } from "@keepquant/gguf";
import type { PackedWeight } from "@keepquant/quant";
import { EngineLoadError } from "../../errors.js";
import type { TensorBytes } from "../../model/load.js";
import { decodeRow, type DequantizeRow } from "../../model/matmul.js";
import { quantDequantizeRow } from "../../model/providers.js";
import type { VisionEncoderWeights, VisionLayerWeights, VisionLinear, VisionNorm } from "./encoder.js";

export async function bindVisionWeights(
  file: Pick<GgufFile, "tensors">,
  bytes: TensorBytes,
  layers: number,
  deepstackLayers: readonly number[] = [],
  dequantize: DequantizeRow = quantDequantizeRow,
): Promise<VisionEncoderWeights> {
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const info = (name: string): GgufTensorInfo => {
    const t = byName.get(name);
    if (!t) throw new EngineLoadError("ENGINE_BAD_MODEL", `projector tensor ${name} is missing`, { field: name });
    return t;
  };
  const has = (name: string) => byName.has(name);
  const matrix = async (name: string): Promise<PackedWeight> => {
    const t = info(name);
    // the last dimension counts output features (a convolution kernel [kw, kh, c, out] is a matrix of kw*kh*c columns)
    const rows = t.ne[t.ne.length - 1]!;
    const cols = t.elements / rows;
    return { type: t.type, groups: 1, rows, cols, data: await bytes(t) };
  };
  const vector = async (name: string): Promise<Float32Array> => {
    const t = info(name);
    const data = await bytes(t);
    const out = new Float32Array(t.elements);
    const { blockSize } = GGML_TYPE_TRAITS[t.type];
    if (t.elements % blockSize !== 0)
      throw new EngineLoadError("ENGINE_BAD_MODEL", `projector tensor ${name}: ${t.elements} values are not whole blocks`, { field: name });
    const weight: PackedWeight = { type: t.type, groups: 1, rows: 1, cols: t.elements, data };
    decodeRow(weight, 0, out, dequantize);
    return out;
  };
  const linear = async (prefix: string): Promise<VisionLinear> => ({
    weight: await matrix(`${prefix}.weight`),
    bias: await vector(`${prefix}.bias`),
  });
  const norm = async (prefix: string): Promise<VisionNorm> => ({
    weight: await vector(`${prefix}.weight`),
    bias: await vector(`${prefix}.bias`),
  });

  const patch0 = await matrix("v.patch_embd.weight");
  const patch1 = await matrix("v.patch_embd.weight.1");
  for (const p of [patch0, patch1]) {
    if (p.type !== GgmlType.F32 && p.type !== GgmlType.F16) {
      throw new EngineLoadError(
        "ENGINE_BAD_MODEL",
        `projector patch embedding is ${GGML_TYPE_TRAITS[p.type].name}; only F32 and F16 convolution kernels are supported`,
        {
          field: "v.patch_embd.weight",
        },
      );
    }
  }
  const layerWeights: VisionLayerWeights[] = [];
  for (let il = 0; il < layers; il++) {
    const b = `v.blk.${il}`;
    const ds = `v.deepstack.${il}`;
    layerWeights.push({
      ln1: await norm(`${b}.ln1`),
      qkv: await linear(`${b}.attn_qkv`),
      out: await linear(`${b}.attn_out`),
      ln2: await norm(`${b}.ln2`),
      up: await linear(`${b}.ffn_up`),
      down: await linear(`${b}.ffn_down`),
      deepstack: deepstackLayers.includes(il)
        ? { norm: await norm(`${ds}.norm`), fc1: await linear(`${ds}.fc1`), fc2: await linear(`${ds}.fc2`) }
        : undefined,
    });
  }
  return {
    patch: [patch0, patch1],
    patchBias: await vector("v.patch_embd.bias"),
    position: await vector("v.position_embd.weight"),
    preNorm: has("v.pre_ln.weight") ? await norm("v.pre_ln") : undefined,
    layers: layerWeights,
    postNorm: has("v.post_ln.weight") ? await norm("v.post_ln") : undefined,
    mm0: await linear("mm.0"),
    mm2: await linear("mm.2"),
  };
}
