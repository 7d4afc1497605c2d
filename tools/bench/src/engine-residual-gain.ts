/**
 * Does the fixture init's residual gain (synthesizeQwen35 `residualGain`, default 4) make a fixture
 * ill-conditioned? For a fixture model and each gain: synthesizes the F32 file (into /tmp/gainfx,
 * never the cache), quantizes it with llama.cpp, takes the oracle's greedy tokens and logits on
 * the 16 parity prompts, and prints: token diversity and immediate repeats, the oracle's
 * top-1/top-2 gap, how far the oracle's logits are from exact arithmetic on the same weights
 * ("ideal": exact decode, f32 activations, f64 accumulation) and how far our bf16 numerics are,
 * then the gate for bf16, ideal and llama numerics against those in-memory goldens.
 *
 *   pnpm --filter @keepquant/bench bench:engine-residual-gain [model=tied-4l] [gains=4,2,1] [type=Q4_K_M]
 */
import fs from "node:fs";
import path from "node:path";
import { decodeF32, runOracle } from "@keepquant/oracle";
import { LLAMA_WEIGHT_TYPES } from "@keepquant/quant";
import { GgmlType, synthesizeQwen35 } from "@keepquant/gguf";
import { Engine } from "@keepquant/engine";
import { engineParityRunner, formatParityReport, goldensFromOracleRun, readGoldensFile, runParityGate } from "@keepquant/engine/parity";
import { TsMatmulProvider, allMatrices, quantDequantizeRow, type MatmulProvider, type PackedMatrix } from "@keepquant/engine/spec";
import { parityModelSpec, fixtureTokenizerFromJson } from "@keepquant/fixtures";
const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..", "..", "..");
const tok = fixtureTokenizerFromJson(JSON.parse(fs.readFileSync(path.join(REPO, "goldens/tokenizer/vocab.json"), "utf8")));
const model = process.argv[2] ?? "tied-4l";
const gains = (process.argv[3] ?? "4,2,1").split(",").map(Number);
const wt = (process.argv[4] ?? "Q4_K_M") as "Q4_K_M";
const ref = readGoldensFile(path.join(REPO, "goldens/parity", `${model}-f32.json`));
const prompts = ref.prompts.map((p) => p.ids);
const ALL = new Set(LLAMA_WEIGHT_TYPES.filter((t) => t !== GgmlType.F32 && t !== GgmlType.F16 && t !== GgmlType.BF16));
fs.mkdirSync("/tmp/gainfx", { recursive: true });
for (const gain of gains) {
  const f32 = `/tmp/gainfx/${model}-g${gain}-f32.gguf`;
  const q = `/tmp/gainfx/${model}-g${gain}-${wt}.gguf`;
  fs.writeFileSync(f32, synthesizeQwen35({ ...parityModelSpec(model, tok), residualGain: gain }));
  await runOracle({ kind: "quantize", input: f32, output: q, ftype: wt, nthread: 2 });
  const res = await runOracle({
    kind: "greedy",
    model: q,
    prompts,
    nTokens: 16,
    withLogits: true,
    threads: 1,
    repack: false,
    kvType: "f32",
  });
  const goldens = goldensFromOracleRun({
    fixture: "x",
    weightType: wt,
    modelSha256: "",
    modelBytes: 0,
    oracle: ref.oracle,
    topK: 64,
    prompts: prompts.map((ids) => ({ ids })),
    runs: res.tokens.map((tokens, p) => ({ tokens, logits: res.logits![p]!.map(decodeF32) })),
  });
  const distinct = new Set(res.tokens.flat()).size;
  let repeats = 0;
  for (const t of res.tokens) for (let i = 1; i < t.length; i++) if (t[i] === t[i - 1]) repeats++;
  // gap stats
  const gaps: number[] = [];
  for (const run of res.logits!)
    for (const l64 of run) {
      const l = decodeF32(l64);
      let a = -Infinity,
        b = -Infinity;
      for (const v of l) {
        if (v > a) {
          b = a;
          a = v;
        } else if (v > b) b = v;
      }
      gaps.push(a - b);
    }
  gaps.sort((x, y) => x - y);
  const lines = [
    `gain ${gain}: distinct ${distinct}/256, immediate repeats ${repeats}, top1-top2 gap median ${gaps[128]!.toFixed(3)}, <50mn ${gaps.filter((g) => g < 0.05).length}`,
  ];
  // oracle vs ideal noise
  const seqs = prompts.map((ids, p) => [...ids, ...res.tokens[p]!]);
  const lo = await runOracle({ kind: "logits", model: q, sequences: seqs, threads: 1, repack: false, kvType: "f32" });
  const ideal = await Engine.load(q, { kvType: "f32", flashAttention: false, numerics: "llama", provider: "ts" });
  const fw = (ideal as unknown as { backend: { spec: unknown } }).backend.spec as { providers: Map<PackedMatrix, MatmulProvider> };
  for (const w of allMatrices(ideal.weights)) fw.providers.set(w, new TsMatmulProvider("exact", quantDequantizeRow, ALL));
  const bf = await Engine.load(q, { kvType: "f32", flashAttention: false, numerics: "bf16" });
  const dO: number[] = [],
    dB: number[] = [];
  for (let p = 0; p < seqs.length; p++) {
    const a = await ideal.evaluate(seqs[p]!);
    const b = await bf.evaluate(seqs[p]!);
    a.forEach((l, pos) => {
      const o = decodeF32(lo.logits[p]![pos]!);
      let m1 = 0,
        m2 = 0;
      for (let i = 0; i < l.length; i++) {
        m1 = Math.max(m1, Math.abs(l[i]! - o[i]!));
        m2 = Math.max(m2, Math.abs(l[i]! - b[pos]![i]!));
      }
      dO.push(m1);
      dB.push(m2);
    });
  }
  dO.sort((x, y) => x - y);
  dB.sort((x, y) => x - y);
  lines.push(
    `  oracle-vs-ideal max|dlogit| median ${dO[dO.length >> 1]!.toFixed(3)} max ${dO[dO.length - 1]!.toFixed(3)}; bf16-vs-ideal median ${dB[dB.length >> 1]!.toFixed(3)} max ${dB[dB.length - 1]!.toFixed(3)}`,
  );
  for (const [label, eng] of [
    ["bf16", bf],
    ["ideal", ideal],
  ] as const) {
    const r = await runParityGate(goldens, engineParityRunner(eng), { numerics: "bf16" });
    lines.push(`  ${label}: ${formatParityReport(r)}`);
  }
  const ll = await Engine.load(q, { kvType: "f32", flashAttention: false, numerics: "llama" });
  lines.push(`  llama: ${formatParityReport(await runParityGate(goldens, engineParityRunner(ll), { numerics: "llama" }))}`);
  ll.dispose();
  ideal.dispose();
  bf.dispose();
  console.log(lines.join("\n"));
}
