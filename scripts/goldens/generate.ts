/**
 * Writes the parity goldens from the oracle (llama.cpp through the raw C API, in a child process):
 * for every fixture and each of the 16 fixed prompts, 16 greedy tokens and the oracle's top-K
 * logits at every step, then goldens/parity/manifest.json (fixture sha256, oracle versions, prompts).
 *
 *   pnpm exec tsx scripts/goldens/generate.ts          # (re)write goldens
 *   pnpm exec tsx scripts/goldens/generate.ts --check  # regenerate in memory, compare with the committed files
 *
 * Oracle settings that make its decode deterministic: F32 K/V cache, CPU repacking off
 * (use_extra_bufts = false), flash attention off, 1 thread, batched prefill then one token per decode.
 */
import fs from "node:fs";
import path from "node:path";
import {
  goldensPath,
  PARITY_MANIFEST_FORMAT,
  PARITY_PROMPTS,
  serializeGoldens,
  type ParityManifest,
  type ParityManifestFixture,
} from "@keepquant/engine/parity";
import { PARITY_FIXTURES, ensureFixture, sha256File } from "@keepquant/fixtures";
import { readGguf, ggmlTypeName } from "@keepquant/gguf";
import { GOLDENS_N_TOKENS, GOLDENS_TOP_K, oracleGoldens, oracleGoldensInfo, parityPromptIds } from "@keepquant/goldens";
import {
  FIXTURE_CACHE,
  GOLDENS_DIR,
  MANIFEST_FILE,
  TOKENIZER_FILE,
  loadFixtureTokenizer,
  oracleQuantize,
  relativeToRepo,
} from "../fixtures/common.js";

const N_TOKENS = GOLDENS_N_TOKENS;
const TOP_K = GOLDENS_TOP_K;
const check = process.argv.includes("--check");

const { tokenizer, sha256: tokenizerSha } = loadFixtureTokenizer();
const oracle = await oracleGoldensInfo(await ensureFixture(PARITY_FIXTURES[0]!, { cacheDir: FIXTURE_CACHE, tokenizer }));

// Prompt ids: text prompts tokenized by the oracle's tokenizer (all fixture models share the vocabulary).
const prompts = await parityPromptIds(path.join(FIXTURE_CACHE, PARITY_FIXTURES[0]!.file));

const fixtures: ParityManifestFixture[] = [];
let mismatches = 0;
fs.mkdirSync(GOLDENS_DIR, { recursive: true });
for (const fixture of PARITY_FIXTURES) {
  const started = performance.now();
  const file = await ensureFixture(fixture, { cacheDir: FIXTURE_CACHE, tokenizer, quantize: oracleQuantize });
  const header = await readGguf(file);
  const tensorTypes: Record<string, number> = {};
  for (const tensor of header.tensors) {
    const name = ggmlTypeName(tensor.type);
    tensorTypes[name] = (tensorTypes[name] ?? 0) + 1;
  }
  const sha256 = sha256File(file);
  const goldens = await oracleGoldens({
    model: file,
    fixture: fixture.name,
    weightType: fixture.weightType,
    modelSha256: sha256,
    modelBytes: fs.statSync(file).size,
    oracle,
    prompts,
    nTokens: N_TOKENS,
    topK: TOP_K,
  });
  const target = goldensPath(GOLDENS_DIR, fixture.name);
  const serialized = serializeGoldens(goldens);
  const ms = Math.round(performance.now() - started);
  if (check) {
    const same = fs.existsSync(target) && fs.readFileSync(target, "utf8") === serialized;
    if (!same) mismatches++;
    console.log(`${fixture.name}: ${same ? "identical to" : "DIFFERS from"} ${relativeToRepo(target)} (${ms} ms)`);
  } else {
    fs.writeFileSync(target, serialized);
    const distinct = new Set(goldens.prompts.flatMap((p) => p.tokens)).size;
    console.log(`${fixture.name}: ${relativeToRepo(target)}  ${JSON.stringify(tensorTypes)}  ${distinct} distinct tokens  (${ms} ms)`);
  }
  fixtures.push({
    name: fixture.name,
    model: fixture.model,
    weightType: fixture.weightType,
    file: fixture.file,
    sha256,
    bytes: fs.statSync(file).size,
    goldens: path.basename(target),
    tensorTypes,
  });
}

const manifest: ParityManifest = {
  format: PARITY_MANIFEST_FORMAT,
  generatedBy: "scripts/goldens/generate.ts",
  oracle,
  tokenizer: { file: relativeToRepo(TOKENIZER_FILE), sha256: tokenizerSha },
  nTokens: N_TOKENS,
  topK: TOP_K,
  prompts: [...PARITY_PROMPTS],
  fixtures,
};
const manifestText = `${JSON.stringify(manifest, null, 2)}\n`;
if (check) {
  const same = fs.existsSync(MANIFEST_FILE) && fs.readFileSync(MANIFEST_FILE, "utf8") === manifestText;
  if (!same) mismatches++;
  console.log(`manifest: ${same ? "identical" : "DIFFERS"}`);
  process.exit(mismatches === 0 ? 0 : 1);
}
fs.writeFileSync(MANIFEST_FILE, manifestText);
console.log(`wrote ${relativeToRepo(MANIFEST_FILE)}`);
