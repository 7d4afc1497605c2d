/**
 * The verification path of speculative decoding on the real 0.8B shape: decode speed with a
 * test-only drafter that proposes the target's true greedy continuation (acceptance 1.0), for
 * k = 1..8, against plain decode, beside two bounds from bytes read:
 * - verification alone: k + 1 tokens per target step that reads the weights once (bound k + 1);
 * - the MTP drafter: each of the k draft steps also reads the drafter block and the shared head,
 *   so the bound is (k + 1) W / (W + k (W_block + W_head)) (W: the target's weight bytes per step).
 * The real-shape files have no MTP block: W_block is estimated as one full-attention layer plus
 * eh_proj [2D, D] in the attention layer's types.
 *
 *   pnpm --filter @keepquant/bench exec tsx src/speculative-curve.ts [model.gguf] [--gen N] [--repeat R] [--json out.json]
 *
 * Default model: the real-shape Q4_K_M file (see real-shape.ts). Medians of R runs (default 3).
 */
import fs from "node:fs";
import { Engine, type SpeculativeOptions } from "@keepquant/engine";
import { GGML_TYPE_TRAITS, readGguf } from "@keepquant/gguf";
import { ensureRealShape } from "./real-shape.js";

interface Args {
  model: string | undefined;
  gen: number;
  repeat: number;
  json: string | undefined;
}

function parseArgs(argv: readonly string[]): Args {
  const args: Args = { model: undefined, gen: 48, repeat: 3, json: undefined };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--gen") args.gen = Number(argv[++i]);
    else if (a === "--repeat") args.repeat = Number(argv[++i]);
    else if (a === "--json") args.json = argv[++i];
    else args.model = a;
  }
  if (!Number.isInteger(args.gen) || args.gen < 9) throw new Error(`--gen must be an integer >= 9, got ${args.gen}`);
  if (!Number.isInteger(args.repeat) || args.repeat < 1) throw new Error(`--repeat must be a positive integer, got ${args.repeat}`);
  return args;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Weight bytes: the target's per step (every matrix once), one attention layer's, the head's, eh_proj's estimate. */
async function weightBytes(model: string): Promise<{ target: number; head: number; block: number }> {
  const file = await readGguf(model);
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const target = file.tensors.reduce((sum, t) => sum + t.byteLength, 0);
  const head = (byName.get("output.weight") ?? byName.get("token_embd.weight"))!.byteLength;
  const layer = (il: number) => file.tensors.filter((t) => t.name.startsWith(`blk.${il}.`)).reduce((sum, t) => sum + t.byteLength, 0);
  const attentionLayer = [...Array(64).keys()].find((il) => byName.has(`blk.${il}.attn_q.weight`))!;
  const q = byName.get(`blk.${attentionLayer}.ffn_up.weight`)!;
  const D = q.ne[0]!;
  const traits = GGML_TYPE_TRAITS[q.type];
  const ehProj = ((2 * D) / traits.blockSize) * traits.typeSize * D;
  return { target, head, block: layer(attentionLayer) + ehProj };
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
const model = args.model ?? (await ensureRealShape(["Q4_K_M"], (line) => process.stderr.write(`${line}\n`))).Q4_K_M;
const prompt = Array.from({ length: 16 }, (_, i) => (i * 7919 + 13) % 1000);
const bytes = await weightBytes(model);

// the greedy continuation the test-only drafter proposes
const truth = (await decodeRate(model, prompt, args.gen, undefined)).tokens;
const full = [...prompt, ...truth];
const drafter = (k: number): SpeculativeOptions => ({
  method: "function",
  draftTokens: k,
  propose: (tokens, count) => full.slice(tokens.length, tokens.length + count),
});
// interleaved (plain, k = 1 .. 8) per repeat, so that load drift on a shared machine hits every k alike
const KS = [1, 2, 3, 4, 5, 6, 7, 8];
const plainRuns: number[] = [];
const runsByK = new Map<number, number[]>(KS.map((k) => [k, []]));
const perStepByK = new Map<number, number>();
for (let r = 0; r < args.repeat; r++) {
  plainRuns.push((await decodeRate(model, prompt, args.gen, undefined)).tokensPerSecond);
  for (const k of KS) {
    const run = await decodeRate(model, prompt, args.gen, drafter(k));
    if (run.tokens.join() !== truth.join()) throw new Error(`k ${k}: speculative tokens differ from plain greedy`);
    runsByK.get(k)!.push(run.tokensPerSecond);
    perStepByK.set(k, run.tokensPerTargetStep);
  }
  process.stderr.write(
    `repeat ${r + 1}/${args.repeat}: plain ${plainRuns.at(-1)!.toFixed(1)} tok/s, ${KS.map((k) => `k${k} ${runsByK.get(k)!.at(-1)!.toFixed(1)}`).join(", ")}\n`,
  );
}
const plain = median(plainRuns);
const rows = KS.map((k) => {
  const runs = runsByK.get(k)!;
  const rate = median(runs);
  const mtpBound = ((k + 1) * bytes.target) / (bytes.target + k * (bytes.block + bytes.head));
  return {
    k,
    tokensPerSecond: rate,
    runs,
    tokensPerTargetStep: perStepByK.get(k)!,
    speedup: rate / plain,
    verificationBound: k + 1,
    mtpBound,
    fractionOfMtpBound: rate / plain / mtpBound,
  };
});

const lines = [
  `model: ${model} (${(fs.statSync(model).size / 2 ** 20).toFixed(0)} MiB); target weights per step ${(bytes.target / 2 ** 20).toFixed(0)} MiB, head ${(bytes.head / 2 ** 20).toFixed(0)} MiB, drafter block (est.) ${(bytes.block / 2 ** 20).toFixed(1)} MiB`,
  `plain decode: ${plain.toFixed(1)} tok/s (median of ${args.repeat})`,
  "",
  "| k | tok/s | speed-up | tokens per target step | verification bound | MTP bytes bound | speed-up / MTP bound |",
  "|---|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.k} | ${r.tokensPerSecond.toFixed(1)} | ${r.speedup.toFixed(2)}x | ${r.tokensPerTargetStep.toFixed(2)} | ${r.verificationBound}x | ${r.mtpBound.toFixed(2)}x | ${(100 * r.fractionOfMtpBound).toFixed(0)}% |`,
  ),
];
process.stdout.write(`${lines.join("\n")}\n`);
if (args.json) fs.writeFileSync(args.json, `${JSON.stringify({ model, bytes, plain, plainRuns, rows }, null, 2)}\n`);
