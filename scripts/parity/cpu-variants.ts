/**
 * What a user sees against llama.cpp's other CPU variants: our kernels match the haswell (AVX2)
 * variant bit for bit, and the goldens are haswell's. For each variant given, llama.cpp computes
 * the teacher-forced logits of every golden sequence (prompt + haswell's 16 greedy tokens) and we
 * count the steps where its argmax differs from haswell's choice (where its greedy run, and ours
 * against it, would first part), with the logit gap there and the largest logit difference.
 *
 *   pnpm exec tsx scripts/parity/cpu-variants.ts tied-4l-q4_k_m haswell skylakex icelake zen4
 */
import path from "node:path";
import { readGoldensFile } from "@keepquant/engine/parity";
import { ensureFixture, parityFixture } from "@keepquant/fixtures";
import { runOracle, decodeF32 } from "@keepquant/oracle";
import { FIXTURE_CACHE, GOLDENS_DIR, loadFixtureTokenizer, oracleQuantize } from "../fixtures/common.js";

const [fixtureName = "tied-4l-q4_k_m", ...variants] = process.argv.slice(2);
const fixture = parityFixture(fixtureName);
const goldens = readGoldensFile(path.join(GOLDENS_DIR, `${fixture.name}.json`));
const model = await ensureFixture(fixture, {
  cacheDir: FIXTURE_CACHE,
  tokenizer: loadFixtureTokenizer().tokenizer,
  quantize: oracleQuantize,
});
const sequences = goldens.prompts.map((p) => [...p.ids, ...p.tokens.slice(0, -1)]);

for (const variant of variants.length > 0 ? variants : ["haswell"]) {
  process.env.KEEPQUANT_ORACLE_CPU_VARIANT = variant;
  let result: { logits: string[][] };
  try {
    result = await runOracle({ kind: "logits", model, sequences, kvType: "f32" }, { timeoutMs: 600_000 });
  } catch (error) {
    console.log(`${variant}: not run (${(error as Error).message.split("\n")[0]})`);
    continue;
  }
  let flips = 0;
  let promptsDiffering = 0;
  let maxFlipGap = 0;
  let maxDiff = 0;
  const gaps: number[] = [];
  goldens.prompts.forEach((prompt, p) => {
    let differs = false;
    for (let s = 0; s < prompt.tokens.length; s++) {
      const logits = decodeF32(result.logits[p]![prompt.ids.length - 1 + s]!);
      let best = 0;
      for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
      const ids = prompt.topIds[s]!;
      const values = prompt.topLogits[s]!;
      for (let k = 0; k < ids.length; k++) maxDiff = Math.max(maxDiff, Math.abs(logits[ids[k]!]! - values[k]!));
      if (best !== prompt.tokens[s]) {
        flips++;
        differs = true;
        const gap = logits[best]! - logits[prompt.tokens[s]!]!;
        gaps.push(gap);
        maxFlipGap = Math.max(maxFlipGap, gap);
      }
    }
    if (differs) promptsDiffering++;
  });
  console.log(
    `${fixture.name}  ${variant.padEnd(14)} argmax differs from haswell at ${flips}/${goldens.prompts.length * goldens.nTokens} steps ` +
      `(${promptsDiffering}/${goldens.prompts.length} prompts), gap there max ${Math.round(maxFlipGap * 1000)} mnats` +
      `${gaps.length ? ` [${gaps.map((g) => Math.round(g * 1000)).join(", ")}]` : ""}; max |dlogit| on the top-64 ${maxDiff.toExponential(2)}`,
  );
}
