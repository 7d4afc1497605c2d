/**
 * Prefill and decode speed of the engine against llama.cpp's raw C API (the oracle build from npm),
 * measured in the same process run on the same GGUF files. Prints a markdown table.
 *
 *   pnpm --filter @keepquant/bench bench:engine-speed                      # synthetic test shape, F32 + Q8_0 + Q4_K_M
 *   KEEPQUANT_BENCH_SHAPE=0.8b pnpm --filter @keepquant/bench bench:engine-speed   # the real Qwen3.5-0.8B shape (Q4_K_M, Q8_0)
 */
import { existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { QWEN35_0_8B_SHAPE, QWEN35_TEST_SHAPE, writeSynthesizedQwen35 } from "@keepquant/gguf";
import { llamaUnavailableReason, loadLlamaOracle, runOracle } from "@keepquant/oracle";
import { Engine } from "@keepquant/engine";

const shapeName = process.env.KEEPQUANT_BENCH_SHAPE ?? "test";
const spec = shapeName === "0.8b" ? QWEN35_0_8B_SHAPE : QWEN35_TEST_SHAPE;
const ftypes = (process.env.KEEPQUANT_BENCH_FTYPES ?? (shapeName === "0.8b" ? "Q4_K_M,Q8_0" : "F32,Q8_0,Q4_K_M")).split(",");
const promptLength = Number(process.env.KEEPQUANT_BENCH_PROMPT ?? 128);
const decodeTokens = Number(process.env.KEEPQUANT_BENCH_DECODE ?? 32);
const threads = Number(process.env.KEEPQUANT_BENCH_THREADS ?? 2);
const repeats = Number(process.env.KEEPQUANT_BENCH_REPEATS ?? 3);
const folder = path.join(tmpdir(), "keepquant-engine-bench");
mkdirSync(folder, { recursive: true });

const base = path.join(folder, `${shapeName}-F32.gguf`);
if (!existsSync(base)) await writeSynthesizedQwen35(base, spec);
const prompt = Array.from({ length: promptLength }, (_, i) => (i * 7919 + 13) % spec.vocab);

function best(values: number[]): number {
  return Math.max(...values);
}

const reason = llamaUnavailableReason();
if (reason) console.log(`SKIP llama.cpp side: ${reason}`);
const llama = reason ? undefined : loadLlamaOracle();

const rows: string[] = [];
for (const ftype of ftypes) {
  const file = ftype === "F32" ? base : path.join(folder, `${shapeName}-${ftype}.gguf`);
  if (!existsSync(file)) await runOracle({ kind: "quantize", input: base, output: file, ftype: ftype as "Q8_0" }, { timeoutMs: 600_000 });

  // ours
  const engine = await Engine.load(file, { threads, maxBatchTokens: 512 });
  const ourPrefill: number[] = [];
  const ourDecode: number[] = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    await engine.evaluate(prompt, { positions: [prompt.length - 1] });
    ourPrefill.push((prompt.length / (performance.now() - t0)) * 1000);
    const result = await engine.generateToEnd(prompt.slice(0, 8), { maxTokens: decodeTokens, temperature: 0, ignoreEog: true });
    ourDecode.push(result.stats.decodeTokensPerSecond);
  }
  const providers = engine.stats().providers;
  engine.dispose();

  // llama.cpp raw C API, same file, same threads, default flash attention off in the oracle context
  let llamaPrefill = NaN;
  let llamaDecode = NaN;
  if (llama) {
    const model = llama.loadModel(file);
    const ctx = model.createContext({
      nCtx: Math.max(512, prompt.length + decodeTokens + 16),
      threads,
      kvType: "f16",
      flashAttention: true,
    });
    const prefill: number[] = [];
    const decode: number[] = [];
    for (let r = 0; r < repeats; r++) {
      ctx.clear();
      const t0 = performance.now();
      ctx.decode(prompt, 0, false);
      prefill.push((prompt.length / (performance.now() - t0)) * 1000);
      ctx.clear();
      const short = prompt.slice(0, 8);
      let logits = ctx.decode(short, 0, false);
      let pos = short.length;
      const t1 = performance.now();
      for (let i = 0; i < decodeTokens; i++) {
        const last = logits[logits.length - 1]!;
        let next = 0;
        for (let v = 1; v < last.length; v++) if (last[v]! > last[next]!) next = v;
        logits = ctx.decode([next], pos++, false);
      }
      decode.push((decodeTokens / (performance.now() - t1)) * 1000);
    }
    ctx.free();
    model.free();
    llamaPrefill = best(prefill);
    llamaDecode = best(decode);
  }
  const p = best(ourPrefill);
  const d = best(ourDecode);
  rows.push(
    `| ${shapeName} | ${ftype} | ${p.toFixed(1)} | ${llamaPrefill.toFixed(1)} | ${(p / llamaPrefill).toFixed(2)} | ${d.toFixed(1)} | ${llamaDecode.toFixed(1)} | ${(d / llamaDecode).toFixed(2)} | ${[
      ...new Set(
        Object.entries(providers)
          .filter(([k]) => k.startsWith("matmul"))
          .map(([, v]) => v),
      ),
    ].join(", ")} |`,
  );
  console.log(rows[rows.length - 1]);
}
console.log(`\nprompt ${promptLength} tokens, decode ${decodeTokens} tokens, ${threads} threads, best of ${repeats}\n`);
console.log(
  "| shape | weights | prefill tok/s (ours) | prefill tok/s (llama.cpp) | ratio | decode tok/s (ours) | decode tok/s (llama.cpp) | ratio | matmul provider |",
);
console.log("|---|---|---|---|---|---|---|---|---|");
for (const row of rows) console.log(row);
