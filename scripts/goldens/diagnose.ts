/**
 * Where does our engine leave llama.cpp? For one fixture, feeds each golden prompt plus the
 * oracle's continuation to both (teacher forcing) and prints, per prompt, the first position whose
 * logits differ at all, the max |difference| and a per-position profile. A difference that starts
 * at one position and persists points at carried state (KV cache, GDN state); one that appears
 * and vanishes points at a per-token op (FFN, head, activation quantization).
 *
 *   pnpm exec tsx scripts/goldens/diagnose.ts <fixture> [--numerics llama|bf16] [--flash-attention]
 *
 * Needs the fixture in the cache (scripts/fixtures/generate.ts) and built quant/tt-native packages.
 */
import path from "node:path";
import { Engine } from "@keepquant/engine";
import { readGoldensFile } from "@keepquant/engine/parity";
import { parityFixture } from "@keepquant/fixtures";
import { decodeF32, runOracle } from "@keepquant/oracle";
import { FIXTURE_CACHE, GOLDENS_DIR } from "../fixtures/common.js";

const args = process.argv.slice(2);
const name = args.find((a) => !a.startsWith("--"));
if (!name) {
  console.error("usage: diagnose.ts <fixture> [--numerics llama|bf16] [--flash-attention]");
  process.exit(2);
}
const numericsIndex = args.indexOf("--numerics");
const numerics = numericsIndex >= 0 ? (args[numericsIndex + 1] as "llama" | "bf16") : "llama";
const fixture = parityFixture(name);
const file = path.join(FIXTURE_CACHE, fixture.file);
const goldens = readGoldensFile(path.join(GOLDENS_DIR, `${fixture.name}.json`));
const sequences = goldens.prompts.map((p) => [...p.ids, ...p.tokens]);
const oracle = await runOracle({ kind: "logits", model: file, sequences, threads: 1, repack: false, kvType: "f32" });
const engine = await Engine.load(file, { kvType: "f32", flashAttention: args.includes("--flash-attention"), numerics });
console.log(`${fixture.name}  ${numerics}  providers ${JSON.stringify(engine.stats().providers)}`);
for (const [index, sequence] of sequences.entries()) {
  const ours = await engine.evaluate(sequence);
  const profile = ours.map((mine, position) => {
    const theirs = decodeF32(oracle.logits[index]![position]!);
    let max = 0;
    for (let i = 0; i < mine.length; i++) max = Math.max(max, Math.abs(mine[i]! - theirs[i]!));
    return max;
  });
  const first = profile.findIndex((d) => d > 0);
  const promptLength = goldens.prompts[index]!.ids.length;
  const cells = profile.map((d) => (d === 0 ? "." : d < 1e-4 ? "~" : d < 1e-2 ? "o" : "X")).join("");
  console.log(
    `prompt ${String(index).padStart(2)}  len ${String(promptLength).padStart(2)}  first diff at ${first < 0 ? "-" : first}` +
      `  max ${Math.max(...profile).toExponential(2)}  ${cells}`,
  );
}
console.log("legend: . identical  ~ < 1e-4  o < 1e-2  X >= 1e-2 (max |our logit - oracle logit| per position)");
engine.dispose();
