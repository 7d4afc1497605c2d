/**
 * Writes the qwen3 parity goldens (goldens/parity-qwen3) from the oracle, with the settings of every
 * committed goldens file (F32 K/V, CPU repacking off, flash attention off, 1 thread): for two qwen3
 * fixtures (tools/fixtures/src/qwen3.ts) and each of the 16 fixed prompts, 16 greedy tokens and the
 * oracle's top-K logits at every step. `keepquant parity <file> --goldens goldens/parity-qwen3` checks a
 * qwen3 file against them (the goldens carry the fixture's sha256).
 *
 *   pnpm exec tsx scripts/goldens/qwen3.ts          # (re)write the goldens
 *   pnpm exec tsx scripts/goldens/qwen3.ts --check  # regenerate in memory, compare with the committed files
 */
import fs from "node:fs";
import path from "node:path";
import { goldensPath, serializeGoldens } from "@keepquant/engine/parity";
import { sha256File } from "@keepquant/fixtures";
import { qwen3FixtureFile } from "@keepquant/fixtures/qwen3";
import { GOLDENS_N_TOKENS, GOLDENS_TOP_K, oracleGoldens, oracleGoldensInfo, parityPromptIds } from "@keepquant/goldens";
import { REPO_ROOT, relativeToRepo } from "../fixtures/common.js";

const GOLDENS_DIR = path.join(REPO_ROOT, "goldens", "parity-qwen3");
/** A K-quant file with a tied head and a Q8_0 file with an untied one. */
const FIXTURES = [
  { model: "qwen3-tied-4l", weightType: "Q4_K_M" },
  { model: "qwen3-untied-4l", weightType: "Q8_0" },
] as const;
const check = process.argv.includes("--check");

let mismatches = 0;
fs.mkdirSync(GOLDENS_DIR, { recursive: true });
for (const { model, weightType } of FIXTURES) {
  const file = await qwen3FixtureFile(model, weightType);
  const name = `${model}-${weightType.toLowerCase()}`;
  const goldens = await oracleGoldens({
    model: file,
    fixture: name,
    weightType,
    modelSha256: sha256File(file),
    modelBytes: fs.statSync(file).size,
    oracle: await oracleGoldensInfo(file),
    prompts: await parityPromptIds(file),
    nTokens: GOLDENS_N_TOKENS,
    topK: GOLDENS_TOP_K,
  });
  const target = goldensPath(GOLDENS_DIR, name);
  const serialized = serializeGoldens(goldens);
  if (check) {
    const same = fs.existsSync(target) && fs.readFileSync(target, "utf8") === serialized;
    if (!same) mismatches++;
    console.log(`${name}: ${same ? "identical to" : "DIFFERS from"} ${relativeToRepo(target)}`);
  } else {
    fs.writeFileSync(target, serialized);
    const distinct = new Set(goldens.prompts.flatMap((p) => p.tokens)).size;
    console.log(`${name}: ${relativeToRepo(target)}  ${distinct} distinct tokens`);
  }
}
if (check) process.exit(mismatches === 0 ? 0 : 1);
