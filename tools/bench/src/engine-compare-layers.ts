/**
 * Per-layer comparison with llama.cpp: runs the oracle build in-process with an eval callback
 * (cb_eval) that captures named F32 activations, runs our TypeScript forward with `Qwen35Forward.tap`, and
 * prints how many elements differ bit-wise per tensor. Debug tool, not a test.
 *
 *   pnpm --filter @keepquant/bench bench:engine-compare-layers <model.gguf> [ids=100,200]
 *   KEEPQUANT_COMPARE_FA=1 pnpm --filter @keepquant/bench bench:engine-compare-layers ...   # flash attention, f16 K/V
 *
 * Struct layouts are those of the oracle build (tools/oracle/src/llama.ts); ggml_tensor field
 * offsets (type 0, ne 16, nb 48, data 248, name 256) are ggml's with GGML_MAX_SRC = 10.
 */
import { createRequire } from "node:module";
import path from "node:path";
import { GgmlType } from "@keepquant/gguf";
import { oracleLibDir } from "@keepquant/oracle";
import { Engine, setLibm, type ActivationTap, type Qwen35Forward } from "@keepquant/engine";

const [file, idsArg = "100,200"] = process.argv.slice(2);
if (!file) throw new Error("usage: engine-compare-layers.ts <model.gguf> [comma-separated ids]");
const ids = idsArg.split(",").map(Number);
/** KEEPQUANT_COMPARE_FA=1: flash attention with an f16 cache (the defaults of both) instead of -fa off with f32 K/V. */
const flashAttention = process.env.KEEPQUANT_COMPARE_FA === "1";

const requireOracle = createRequire(path.resolve(path.dirname(new URL(import.meta.url).pathname), "../../../tools/oracle/package.json"));
const koffi = requireOracle("koffi");
const dir = oracleLibDir();
koffi.load(path.join(dir, "libggml-base.so"));
const ggml = koffi.load(path.join(dir, "libggml.v0.5.0.so"));
const lib = koffi.load(path.join(dir, "libllama.v0.5.0.so"));
const ModelParams = koffi.struct("kq_cmp_mp", {
  devices: "void *",
  tensor_buft_overrides: "void *",
  n_gpu_layers: "int32_t",
  split_mode: "int",
  load_mode: "int",
  lazy_mode: "int",
  main_gpu: "int32_t",
  tensor_split: "void *",
  progress_callback: "void *",
  progress_callback_user_data: "void *",
  kv_overrides: "void *",
  vocab_only: "bool",
  check_tensors: "bool",
  use_extra_bufts: "bool",
  no_host: "bool",
  no_alloc: "bool",
  load_mtp: "bool",
});
const ContextParams = koffi.struct("kq_cmp_cp", {
  n_ctx: "uint32_t",
  n_batch: "uint32_t",
  n_ubatch: "uint32_t",
  n_seq_max: "uint32_t",
  n_rs_seq: "uint32_t",
  n_outputs_max: "uint32_t",
  n_outputs_max_per_seq: "uint32_t",
  n_threads: "int32_t",
  n_threads_batch: "int32_t",
  ctx_type: "int",
  rope_scaling_type: "int",
  pooling_type: "int",
  attention_type: "int",
  flash_attn_type: "int",
  rope_freq_base: "float",
  rope_freq_scale: "float",
  yarn_ext_factor: "float",
  yarn_attn_factor: "float",
  yarn_beta_fast: "float",
  yarn_beta_slow: "float",
  yarn_orig_ctx: "uint32_t",
  defrag_thold: "float",
  cb_eval: "void *",
  cb_eval_user_data: "void *",
  type_k: "int",
  type_v: "int",
  abort_callback: "void *",
  abort_callback_data: "void *",
  embeddings: "bool",
  offload_kqv: "bool",
  no_perf: "bool",
  op_offload: "bool",
  swa_full: "bool",
  kv_unified: "bool",
  samplers: "void *",
  n_samplers: "size_t",
  ctx_other: "void *",
});
const Batch = koffi.struct("kq_cmp_batch", {
  n_tokens: "int32_t",
  token: "int32_t *",
  embd: "float *",
  pos: "int32_t *",
  n_seq_id: "int32_t *",
  seq_id: "int32_t **",
  logits: "int8_t *",
});
void ModelParams;
void ContextParams;
void Batch;
ggml.func("void *ggml_backend_load(const char *path)")(path.join(dir, "libggml-cpu-haswell.so"));
lib.func("void llama_backend_init(void)")();
const CallbackType = koffi.proto("bool kq_cmp_cb(void *t, bool ask, void *user_data)");
const captured = new Map<string, Float32Array>();
const callback = koffi.register((tensor: unknown, ask: boolean) => {
  const raw = new Uint8Array(koffi.view(tensor, 320));
  let name = "";
  for (let i = 256; i < 320 && raw[i]; i++) name += String.fromCharCode(raw[i]!);
  if (ask) return true;
  const view = new DataView(raw.buffer);
  const ne = [0, 1, 2, 3].map((i) => Number(view.getBigInt64(16 + 8 * i, true)));
  const nb = [0, 1, 2, 3].map((i) => Number(view.getBigUint64(48 + 8 * i, true)));
  const data = koffi.decode(tensor, 248, "void *");
  const contiguous = nb[0] === 4 && nb[1] === 4 * ne[0]! && nb[2] === nb[1]! * ne[1]!;
  if (view.getInt32(0, true) === GgmlType.F32 && data && contiguous) {
    captured.set(name, new Float32Array(koffi.view(data, ne[0]! * ne[1]! * ne[2]! * ne[3]! * 4)).slice());
  }
  return true;
}, koffi.pointer(CallbackType));
const modelParams = lib.func("kq_cmp_mp llama_model_default_params(void)")();
Object.assign(modelParams, { n_gpu_layers: 0, use_extra_bufts: false, load_mode: 1 });
const model = lib.func("void *llama_model_load_from_file(const char *path, kq_cmp_mp params)")(file, modelParams);
const contextParams = lib.func("kq_cmp_cp llama_context_default_params(void)")();
Object.assign(contextParams, {
  n_ctx: 512,
  n_batch: 512,
  n_ubatch: 512,
  n_threads: 2,
  n_threads_batch: 2,
  type_k: flashAttention ? GgmlType.F16 : GgmlType.F32,
  type_v: flashAttention ? GgmlType.F16 : GgmlType.F32,
  flash_attn_type: flashAttention ? 1 : 0,
  cb_eval: callback,
  no_perf: true,
});
const context = lib.func("void *llama_init_from_model(void *model, kq_cmp_cp params)")(model, contextParams);
const batch = lib.func("kq_cmp_batch llama_batch_get_one(int32_t *tokens, int32_t n)")(Int32Array.from(ids), ids.length);
const status = lib.func("int32_t llama_decode(void *ctx, kq_cmp_batch batch)")(context, batch);
if (status !== 0) throw new Error(`llama_decode returned ${status}`);

// the TypeScript forward (the native step has no taps), with the native matmul kernels and, as
// llama.cpp, the C library's libm (JavaScript's Math rounds some logf/expf results differently)
const native = await import("@keepquant/tt-native");
if (native.nativeAddon()) setLibm(native.nativeLibm());
const engine = await Engine.load(file, { kvType: flashAttention ? "f16" : "f32", flashAttention, nativeStep: false });
const ours = new Map<string, Float32Array>();
const tap: ActivationTap = (name, data, rows, width) => ours.set(name, data.slice(0, rows * width));
(engine as unknown as { backend: { spec: Qwen35Forward } }).backend.spec.tap = tap;
await engine.evaluate(ids, { positions: [ids.length - 1] });
// every tap shares llama.cpp's callback name, except the GDN mixer's output (its linear_attn_out)
const theirName = (mine: string): string => (mine === "mixer_out" ? "linear_attn_out" : mine);
const skipped: string[] = [];
for (let il = 0; il < engine.weights.config.nLayer; il++) {
  for (const [key, b] of ours) {
    const match = /^(.*)-(\d+)$/.exec(key)!;
    if (Number(match[2]) !== il) continue;
    const theirs = theirName(match[1]!);
    const a = captured.get(`${theirs}-${il}`);
    if (!a || a.length !== b.length) {
      skipped.push(`${key} (${a ? `${a.length} vs our ${b.length} values` : "not captured"})`);
      continue;
    }
    let differ = 0;
    let max = 0;
    for (let i = 0; i < a.length; i++) {
      if (a[i] !== b[i]) {
        differ++;
        max = Math.max(max, Math.abs(a[i]! - b[i]!));
      }
    }
    console.log(`layer ${il} ${theirs}: ${differ}/${a.length} differ (max ${max.toExponential(1)})`);
  }
}
if (skipped.length > 0) console.log(`not compared: ${skipped.join(", ")}`);
engine.dispose();
