/**
 * Is a bf16-mode divergence a bug or the fixture's sensitivity? For one parity fixture, feeds the
 * golden sequences (prompt + oracle continuation, teacher forcing) to several numerics variants and
 * prints, per variant, the max |logit difference| against llama.cpp's logits and against an
 * "ideal" variant (the file's weights decoded exactly, f32 activations, f64 accumulation: no
 * activation quantization, no bf16 rounding):
 *
 *   llama        our llama numerics (bit-exact replica of the oracle where kernels allow)
 *   bf16         our bf16 numerics (the contract for Q4_K/Q5_K/Q6_K/Q8_0, bf16 embedding twin)
 *   ideal        exact weights, f32 activations, f64 accumulation (the engine's `exact` numerics)
 *   ideal+twin   ideal matmuls, bf16-rounded embedding rows (the twin alone)
 *   ideal+bf16w  every matmul weight rounded once to bf16, exact embedding (the contract alone)
 *   ideal+noise  ideal with each embedding element multiplied by (1 + u * 2^-9), u uniform in [-1, 1]
 *                (a perturbation of bf16-rounding size that is not rounding: tests plain sensitivity)
 *
 * Also checks one contract matmul (layer 0 ffn_up on real activations) against a float64 product:
 * worst |y - y64| as a ratio of the analytic envelope sum_k |x_k||w_k| 2^-8.
 *
 *   pnpm --filter @keepquant/bench bench:engine-bf16-sensitivity <fixture> [--prompts N]
 */
import path from "node:path";
import { decodeF32, runOracle } from "@keepquant/oracle";
import { GgmlType } from "@keepquant/gguf";
import { LLAMA_WEIGHT_TYPES, matmulDense } from "@keepquant/quant";
import { Engine, type ActivationTap } from "@keepquant/engine";
import { engineParityRunner, formatParityReport, readGoldensFile, runParityGate } from "@keepquant/engine/parity";
import {
  TsMatmulProvider,
  allMatrices,
  decodeRow,
  quantDequantizeRow,
  type MatmulProvider,
  type PackedMatrix,
} from "@keepquant/engine/spec";
import { parityFixture } from "@keepquant/fixtures";

const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..", "..", "..");
const args = process.argv.slice(2);
const name = args.find((a) => !a.startsWith("--"));
if (!name) throw new Error("usage: engine-bf16-sensitivity.ts <fixture> [--prompts N]");
const promptsIndex = args.indexOf("--prompts");
const nPrompts = promptsIndex >= 0 ? Number(args[promptsIndex + 1]) : 16;
const fixture = parityFixture(name);
const file = path.join(process.env.KEEPQUANT_FIXTURE_CACHE ?? path.join(REPO, ".cache", "fixtures"), fixture.file);
const goldens = readGoldensFile(path.join(REPO, "goldens", "parity", `${fixture.name}.json`));
const prompts = goldens.prompts.slice(0, nPrompts);
const sequences = prompts.map((p) => [...p.ids, ...p.tokens]);
const oracle = await runOracle({ kind: "logits", model: file, sequences, threads: 1, repack: false, kvType: "f32" });
const oracleLogits = sequences.map((s, i) => s.map((_, pos) => decodeF32(oracle.logits[i]![pos]!)));

const ALL_TYPES = new Set(LLAMA_WEIGHT_TYPES.filter((t) => t !== GgmlType.F32 && t !== GgmlType.F16 && t !== GgmlType.BF16));
type Forward = { providers: Map<PackedMatrix, MatmulProvider> };

/** Replaces every matmul provider of `engine` (debug only: reaches into the forward; used only for the
 * ideal+twin and ideal+bf16w mixes, which no engine numerics mode offers). */
function setProviders(engine: Engine, provider: MatmulProvider): void {
  const forward = (engine as unknown as { backend: { spec: Forward } }).backend.spec;
  for (const w of allMatrices(engine.weights)) forward.providers.set(w, provider);
}

async function variant(label: string): Promise<Engine> {
  const base = { kvType: "f32", flashAttention: false } as const;
  switch (label) {
    case "llama":
      return Engine.load(file, { ...base, numerics: "llama", exactKernels: true });
    case "bf16":
      return Engine.load(file, { ...base, numerics: "bf16" });
    case "ideal":
    case "ideal+noise":
      return Engine.load(file, { ...base, numerics: "exact" });
    case "ideal+twin": {
      const engine = await Engine.load(file, { ...base, numerics: "bf16", provider: "ts" });
      setProviders(engine, new TsMatmulProvider("exact", quantDequantizeRow, ALL_TYPES));
      return engine;
    }
    case "ideal+bf16w": {
      const engine = await Engine.load(file, { ...base, numerics: "llama", provider: "ts" });
      setProviders(engine, new TsMatmulProvider("bf16", quantDequantizeRow, ALL_TYPES));
      return engine;
    }
  }
  throw new Error(label);
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}
function std(a: Float32Array): number {
  let s = 0;
  let s2 = 0;
  for (const v of a) {
    s += v;
    s2 += v * v;
  }
  const mean = s / a.length;
  return Math.sqrt(s2 / a.length - mean * mean);
}
function quantiles(values: number[]): string {
  const v = [...values].sort((a, b) => a - b);
  const q = (p: number): string => v[Math.min(v.length - 1, Math.floor(p * v.length))]!.toExponential(2);
  return `median ${q(0.5)}  p90 ${q(0.9)}  max ${v[v.length - 1]!.toExponential(2)}`;
}

/** Greedy-relevant: at each generation step, the oracle's gap between its token and our argmax. */
function argmax(a: Float32Array): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i]! > a[best]!) best = i;
  return best;
}

const labels = ["llama", "bf16", "ideal", "ideal+twin", "ideal+bf16w", "ideal+noise"];
const results = new Map<string, Float32Array[][]>();
const gateLines: string[] = [];
for (const label of labels) {
  const engine = await variant(label);
  if (label === "ideal+noise") {
    // perturb the exact embedding decode: wrap decodeRow through a noisy copy of the embedding
    const embd = engine.weights.tokenEmbd;
    const cols = embd.cols;
    const noisy = new Float32Array(embd.rows * cols);
    const row = new Float32Array(cols);
    let state = 12345;
    const rand = (): number => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state / 4294967296;
    };
    for (let r = 0; r < embd.rows; r++) {
      decodeRow(embd, r, row, quantDequantizeRow);
      for (let c = 0; c < cols; c++) noisy[r * cols + c] = row[c]! * (1 + (2 * rand() - 1) * 2 ** -9);
    }
    (engine.weights as { tokenEmbd: PackedMatrix }).tokenEmbd = {
      ...embd,
      type: GgmlType.F32,
      typeName: "F32",
      rowBytes: cols * 4,
      data: new Uint8Array(noisy.buffer),
    };
  }
  const all: Float32Array[][] = [];
  for (const s of sequences) all.push(await engine.evaluate(s));
  results.set(label, all);
  if (nPrompts === goldens.prompts.length) {
    const report = await runParityGate(goldens, engineParityRunner(engine), {
      numerics: label === "llama" ? "llama" : label === "ideal" ? "exact" : "bf16",
    });
    gateLines.push(`${label.padEnd(12)} gate: ${formatParityReport(report).replace(/^\S+\s+\S+\s+/, "")}`);
  }
  engine.dispose();
}

const ideal = results.get("ideal")!;
let logitStd = 0;
let count = 0;
for (const seq of oracleLogits) {
  for (const l of seq) {
    logitStd += std(l);
    count++;
  }
}
console.log(`${fixture.name}: ${prompts.length} prompts, ${count} positions, mean logit std ${(logitStd / count).toFixed(3)}`);
for (const label of labels) {
  const ours = results.get(label)!;
  const vsOracle: number[] = [];
  const vsIdeal: number[] = [];
  const gaps: number[] = [];
  ours.forEach((seq, i) =>
    seq.forEach((l, pos) => {
      vsOracle.push(maxAbsDiff(l, oracleLogits[i]![pos]!));
      vsIdeal.push(maxAbsDiff(l, ideal[i]![pos]!));
      // generation steps: positions >= promptLength - 1; oracle gap where our argmax differs
      if (pos >= prompts[i]!.ids.length - 1 && pos < seq.length - 0) {
        const o = oracleLogits[i]![pos]!;
        const mine = argmax(l);
        const theirs = argmax(o);
        if (mine !== theirs) gaps.push(o[theirs]! - o[mine]!);
      }
    }),
  );
  // growth along the sequence (recurrent state / KV carrying errors forward): early vs late positions
  const early: number[] = [];
  const late: number[] = [];
  ours.forEach((seq, i) => seq.forEach((l, pos) => (pos < 8 ? early : pos >= 24 ? late : []).push(maxAbsDiff(l, ideal[i]![pos]!))));
  const med = (v: number[]): string => (v.length === 0 ? "-" : [...v].sort((a, b) => a - b)[v.length >> 1]!.toExponential(2));
  console.log(`${label.padEnd(12)} vs ideal by position: median at pos < 8 ${med(early)}, at pos >= 24 ${med(late)}`);
  console.log(
    `${label.padEnd(12)} vs oracle: ${quantiles(vsOracle)} | vs ideal: ${quantiles(vsIdeal)} | argmax flips ${gaps.length}, max oracle gap ${Math.round(1000 * Math.max(0, ...gaps))} mnats`,
  );
}

for (const line of gateLines) console.log(line);

// one contract matmul on real activations: layer 0 ffn_up through the bf16 engine's provider
{
  // the TypeScript forward (taps), with the engine's bf16 providers
  const engine = await Engine.load(file, { kvType: "f32", flashAttention: false, numerics: "bf16", nativeStep: false });
  const forward = (engine as unknown as { backend: { spec: Forward & { tap: ActivationTap | undefined } } }).backend.spec;
  let x: Float32Array | undefined;
  let rows = 0;
  forward.tap = (tapName, data, r, width) => {
    if (tapName === "attn_norm-0" && !x) {
      x = data.slice(0, r * width);
      rows = r;
    }
  };
  await engine.evaluate(sequences[0]!);
  const layer = engine.weights.layers[0]!;
  for (const w of [layer.ffnUp, layer.ffnGate]) {
    const provider = forward.providers.get(w)!;
    const y = new Float32Array(rows * w.rows);
    matmulDense(provider, w, x!, rows, y);
    const wRow = new Float32Array(w.cols);
    let worstRatio = 0;
    let worstRounded = 0;
    for (let n = 0; n < w.rows; n++) {
      decodeRow(w, n, wRow, quantDequantizeRow);
      for (let t = 0; t < rows; t++) {
        let exact = 0;
        let rounded = 0;
        let bound = 0;
        for (let k = 0; k < w.cols; k++) {
          const xv = x![t * w.cols + k]!;
          exact += xv * wRow[k]!;
          rounded += xv * bf16(wRow[k]!);
          bound += Math.abs(xv * wRow[k]!) * 2 ** -8;
        }
        const got = y[t * w.rows + n]!;
        worstRatio = Math.max(worstRatio, Math.abs(got - exact) / bound);
        worstRounded = Math.max(worstRounded, Math.abs(got - rounded) / bound);
      }
    }
    console.log(
      `contract ${w.name} (${w.typeName}, provider ${provider.name}, ${rows} rows): worst |y - y64| / envelope ${worstRatio.toFixed(4)}; vs f64 product of the bf16-rounded weights ${worstRounded.toExponential(2)}`,
    );
  }
  engine.dispose();
}

function bf16(v: number): number {
  const f = new Float32Array([v]);
  const u = new Uint32Array(f.buffer);
  const bits = u[0]!;
  u[0] = ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) << 16;
  return f[0]!;
}
