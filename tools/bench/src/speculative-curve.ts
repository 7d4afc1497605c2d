/**
 * Speculative decoding on the real 0.8B shape with acceptance 1.0: decode speed when every drafter
 * proposes the target's true greedy continuation, for k = 1..8, against plain decode, beside the
 * bounds from bytes read per accepted token (W: the target's weight bytes per step):
 * - `verify` (no drafter, method "function"): the verification path alone, bound k + 1;
 * - `mtp`: the file's MTP drafter runs for every draft and its cost is paid (its picks are replaced
 *   by the true continuation): bound (k + 1) W / (W + k (W_block + W_head)), the bound;
 * - `mtp-reduced`: the same with `draftVocab` (the drafter's head scores the first N ids): bound
 *   (k + 1) W / (W + k (W_block + W_head N / vocab)).
 *
 *   pnpm --filter @keepquant/bench exec tsx src/speculative-curve.ts [model.gguf] [--gen N] [--repeat R] [--draft-vocab N] [--json out.json]
 *
 * Default model: the real-shape Q4_K_M file with the MTP block (real-shape.ts --mtp). A file
 * without an MTP block measures `verify` only (its bound's drafter block then estimated). Medians
 * of R runs (default 3).
 */
import fs from "node:fs";
import { Engine, type SpeculativeOptions } from "@keepquant/engine";
import { GGML_TYPE_TRAITS, readGguf } from "@keepquant/gguf";
import { ensureRealShape } from "./real-shape.js";

interface Args {
  model: string | undefined;
  draftVocab: number;
  gen: number;
  repeat: number;
  json: string | undefined;
}

function parseArgs(argv: readonly string[]): Args {
  const args: Args = { model: undefined, draftVocab: 32768, gen: 48, repeat: 3, json: undefined };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--gen") args.gen = Number(argv[++i]);
    else if (a === "--repeat") args.repeat = Number(argv[++i]);
    else if (a === "--json") args.json = argv[++i];
    else if (a === "--draft-vocab") args.draftVocab = Number(argv[++i]);
    else args.model = a;
  }
  if (!Number.isInteger(args.gen) || args.gen < 9) throw new Error(`--gen must be an integer >= 9, got ${args.gen}`);
  if (!Number.isInteger(args.draftVocab) || args.draftVocab < 1)
    throw new Error(`--draft-vocab must be a positive integer, got ${args.draftVocab}`);
  if (!Number.isInteger(args.repeat) || args.repeat < 1) throw new Error(`--repeat must be a positive integer, got ${args.repeat}`);
  return args;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/**
 * Weight bytes read per step: the target's (every trunk matrix and the head once), the head's, and
 * the drafter block's (`blk.{n_layer}.*`, read by every draft step with the head). Files without an
 * MTP block get the block estimated as one full-attention layer plus eh_proj [2D, D].
 */
async function weightBytes(model: string): Promise<{ target: number; head: number; block: number; blockMeasured: boolean; vocab: number }> {
  const file = await readGguf(model);
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const nextn = file.metadata.get("qwen35.nextn_predict_layers")?.value;
  const blockCount = Number(file.metadata.get("qwen35.block_count")?.value);
  const drafterLayer = nextn ? blockCount - 1 : undefined;
  const layer = (il: number) => file.tensors.filter((t) => t.name.startsWith(`blk.${il}.`)).reduce((sum, t) => sum + t.byteLength, 0);
  const all = file.tensors.reduce((sum, t) => sum + t.byteLength, 0);
  const headTensor = (byName.get("output.weight") ?? byName.get("token_embd.weight"))!;
  const head = headTensor.byteLength;
  const vocab = headTensor.ne[1]!;
  if (drafterLayer !== undefined) {
    const block = layer(drafterLayer);
    return { target: all - block, head, block, blockMeasured: true, vocab };
  }
  const attentionLayer = [...Array(64).keys()].find((il) => byName.has(`blk.${il}.attn_q.weight`))!;
  const up = byName.get(`blk.${attentionLayer}.ffn_up.weight`)!;
  const D = up.ne[0]!;
  const traits = GGML_TYPE_TRAITS[up.type];
  const ehProj = ((2 * D) / traits.blockSize) * traits.typeSize * D;
  return { target: all, head, block: layer(attentionLayer) + ehProj, blockMeasured: false, vocab };
}

async function decodeRate(
  model: string,
  prompt: readonly number[],
  gen: number,
  speculative: SpeculativeOptions | undefined,
): Promise<{ tokensPerSecond: number; tokens: number[]; tokensPerTargetStep: number }> {
  const engine = await Engine.load(model, { maxSequences: 1, kvCacheTokens: 1024, ...(speculative ? { speculative } : {}) });
  try {
    const result = await engine.generateToEnd(prompt, { maxTokens: gen, stopAtEog: false });
    return {
      tokensPerSecond: result.stats.decodeTokensPerSecond,
      tokens: result.tokens,
      tokensPerTargetStep: engine.stats().speculative?.tokensPerTargetStep ?? 1,
    };
  } finally {
    engine.dispose();
  }
}

const args = parseArgs(process.argv.slice(2));
const model = args.model ?? (await ensureRealShape(["Q4_K_M-mtp"], (line) => process.stderr.write(`${line}\n`)))["Q4_K_M-mtp"];
const prompt = Array.from({ length: 16 }, (_, i) => (i * 7919 + 13) % 1000);
const bytes = await weightBytes(model);
const hasDrafter = bytes.blockMeasured;

// the greedy continuation every test-only drafter proposes (acceptance 1.0)
const truth = (await decodeRate(model, prompt, args.gen, undefined)).tokens;
const full = [...prompt, ...truth];
const propose = (tokens: readonly number[], count: number) => full.slice(tokens.length, tokens.length + count);

/**
 * The drafters measured, each proposing the true continuation:
 * - `verify`: no drafter at all (method "function"): the verification path alone;
 * - `mtp`: the file's MTP drafter runs for every draft (its cost paid), its picks replaced;
 * - `mtp-reduced`: the same with `draftVocab` (the drafter's head scores the first ids only).
 */
type Mode = "verify" | "mtp" | "mtp-reduced";
const MODES: Mode[] = hasDrafter ? ["verify", "mtp", "mtp-reduced"] : ["verify"];
const options = (mode: Mode, k: number): SpeculativeOptions =>
  mode === "verify"
    ? { method: "function", draftTokens: k, propose }
    : { method: "mtp", draftTokens: k, propose, ...(mode === "mtp-reduced" ? { draftVocab: args.draftVocab } : {}) };
/** Bytes read per accepted token bound: (k + 1) W / (W + k (W_block + W_head share)). */
const bound = (mode: Mode, k: number): number => {
  if (mode === "verify") return k + 1;
  const headShare = mode === "mtp" ? bytes.head : (bytes.head * args.draftVocab) / bytes.vocab;
  return ((k + 1) * bytes.target) / (bytes.target + k * (bytes.block + headShare));
};
/** The bound: the exact MTP drafter's (every draft step reads the block and the whole head). */
const mtpBound = (k: number): number => ((k + 1) * bytes.target) / (bytes.target + k * (bytes.block + bytes.head));

// interleaved (plain, then every mode and k) per repeat, so that load drift hits every row alike
const KS = [1, 2, 3, 4, 5, 6, 7, 8];
const plainRuns: number[] = [];
const key = (mode: Mode, k: number) => `${mode}/${k}`;
const runs = new Map<string, number[]>();
const perStep = new Map<string, number>();
for (let r = 0; r < args.repeat; r++) {
  plainRuns.push((await decodeRate(model, prompt, args.gen, undefined)).tokensPerSecond);
  for (const k of KS) {
    for (const mode of MODES) {
      const run = await decodeRate(model, prompt, args.gen, options(mode, k));
      if (run.tokens.join() !== truth.join()) throw new Error(`${mode} k ${k}: speculative tokens differ from plain greedy`);
      runs.set(key(mode, k), [...(runs.get(key(mode, k)) ?? []), run.tokensPerSecond]);
      perStep.set(key(mode, k), run.tokensPerTargetStep);
    }
  }
  process.stderr.write(
    `repeat ${r + 1}/${args.repeat}: plain ${plainRuns.at(-1)!.toFixed(1)} tok/s; ` +
      MODES.map((mode) => `${mode} ${KS.map((k) => runs.get(key(mode, k))!.at(-1)!.toFixed(1)).join(" ")}`).join("; ") +
      "\n",
  );
}
const plain = median(plainRuns);
const rows = MODES.flatMap((mode) =>
  KS.map((k) => {
    const rates = runs.get(key(mode, k))!;
    const rate = median(rates);
    return {
      mode,
      k,
      tokensPerSecond: rate,
      runs: rates,
      tokensPerTargetStep: perStep.get(key(mode, k))!,
      speedup: rate / plain,
      ownBound: bound(mode, k),
      mtpBound: mtpBound(k),
      fractionOfMtpBound: rate / plain / mtpBound(k),
      fractionOfOwnBound: rate / plain / bound(mode, k),
    };
  }),
);

const MiB = 2 ** 20;
const lines = [
  `model: ${model} (${(fs.statSync(model).size / MiB).toFixed(0)} MiB); target weights per step ${(bytes.target / MiB).toFixed(0)} MiB, head ${(bytes.head / MiB).toFixed(0)} MiB (${bytes.vocab} rows), drafter block ${(bytes.block / MiB).toFixed(1)} MiB${bytes.blockMeasured ? "" : " (estimated: no MTP block in the file)"}`,
  `plain decode: ${plain.toFixed(1)} tok/s (median of ${args.repeat}: ${plainRuns.map((r) => r.toFixed(1)).join(", ")}); ${args.gen} tokens after a ${prompt.length}-token prompt; reduced drafter head: ${args.draftVocab} ids`,
  "",
  "| drafter | k | tok/s (median) | speed-up | tokens per target step | its own bytes bound | exact-MTP bytes bound | speed-up / exact-MTP bound | speed-up / own bound |",
  "|---|---|---|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.mode} | ${r.k} | ${r.tokensPerSecond.toFixed(1)} | ${r.speedup.toFixed(2)}x | ${r.tokensPerTargetStep.toFixed(2)} | ${r.ownBound.toFixed(2)}x | ${r.mtpBound.toFixed(2)}x | ${(100 * r.fractionOfMtpBound).toFixed(0)}% | ${(100 * r.fractionOfOwnBound).toFixed(0)}% |`,
  ),
];
process.stdout.write(`${lines.join("\n")}\n`);
if (args.json) fs.writeFileSync(args.json, `${JSON.stringify({ model, bytes, plain, plainRuns, rows }, null, 2)}\n`);
