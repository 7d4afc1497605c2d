/**
 * Per-layer comparison with llama.cpp: runs the oracle build in-process with an eval callback
 * (cb_eval) that captures named F32 activations, runs our TypeScript forward with `Qwen35Forward.tap`, and
 * prints how many elements differ bit-wise per tensor. Debug tool, not a test.
 *
 *   pnpm --filter @keepquant/bench bench:engine-compare-layers <model.gguf> [ids=100,200]
 *   KEEPQUANT_COMPARE_FA=1 pnpm --filter @keepquant/bench bench:engine-compare-layers ...   # flash attention, f16 K/V
 */
import { loadLlamaOracle } from "@keepquant/oracle";
import { Engine, setLibm, type ActivationTap, type Qwen35Forward } from "@keepquant/engine";

const [file, idsArg = "100,200"] = process.argv.slice(2);
if (!file) throw new Error("usage: engine-compare-layers.ts <model.gguf> [comma-separated ids]");
const ids = idsArg.split(",").map(Number);
/** KEEPQUANT_COMPARE_FA=1: flash attention with an f16 cache (the defaults of both) instead of -fa off with f32 K/V. */
const flashAttention = process.env.KEEPQUANT_COMPARE_FA === "1";

// llama.cpp (the oracle, in this process): one batched decode of `ids` with the eval callback capturing
// every contiguous F32 activation under its callback name
const captured = new Map<string, Float32Array>();
const llamaModel = loadLlamaOracle().loadModel(file, { repack: false });
const context = llamaModel.createContext({
  nCtx: 512,
  threads: 2,
  kvType: flashAttention ? "f16" : "f32",
  flashAttention,
  onF32Tensor: (name, values) => captured.set(name, values),
});
context.decode(ids, 0, false);
context.free();
llamaModel.free();

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
