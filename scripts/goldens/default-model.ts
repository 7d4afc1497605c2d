/**
 * Parity goldens of the embedded default model (the trained Q4_K_M file) from the oracle, llama.cpp
 * through the raw C API in a child process, with the same settings as the fixture goldens
 * (scripts/goldens/generate.ts): F32 K/V, repacking off, flash attention off, 1 thread, the pinned
 * haswell CPU variant. The 16 fixed prompts (PARITY_PROMPTS) are tokenized by the oracle with the
 * model's own vocabulary; 16 greedy tokens and the top-64 logits at every step.
 *
 *   pnpm exec tsx scripts/goldens/default-model.ts [--model <file.gguf>]   # (re)write the goldens
 *   pnpm exec tsx scripts/goldens/default-model.ts --check                  # regenerate, compare
 *
 * The model file comes from goldens/default-model/manifest.json ("file", repo-relative) unless
 * --model names another one (which then becomes the manifest's file).
 */
import fs from "node:fs";
import path from "node:path";
import {
  defaultModelGoldensDir,
  DEFAULT_MODEL_MANIFEST_FORMAT,
  readDefaultModelManifest,
  serializeGoldens,
  type DefaultModelManifest,
} from "@keepquant/engine/parity";
import { sha256File } from "@keepquant/fixtures";
import { readGguf, ggmlTypeName, getMetadata } from "@keepquant/gguf";
import { GOLDENS_N_TOKENS, GOLDENS_TOP_K, oracleGoldens, oracleGoldensInfo, parityPromptIds } from "@keepquant/goldens";
import { REPO_ROOT, relativeToRepo } from "../fixtures/common.js";

const check = process.argv.includes("--check");
const modelArg = process.argv.indexOf("--model");
const manifestFile = path.join(defaultModelGoldensDir(REPO_ROOT), "manifest.json");
const previous = fs.existsSync(manifestFile) ? readDefaultModelManifest(manifestFile) : undefined;
const modelFile =
  modelArg > 0 ? path.resolve(process.argv[modelArg + 1]!) : previous ? path.join(REPO_ROOT, previous.model.file) : undefined;
if (!modelFile || !fs.existsSync(modelFile)) {
  console.error(`default model file not found (${modelFile ?? "no manifest and no --model"})`);
  process.exit(1);
}

const header = await readGguf(modelFile);
const tensorTypes: Record<string, number> = {};
for (const tensor of header.tensors) tensorTypes[ggmlTypeName(tensor.type)] = (tensorTypes[ggmlTypeName(tensor.type)] ?? 0) + 1;
const oracle = await oracleGoldensInfo(modelFile);
const name = "default-q4_k_m";
const sha256 = sha256File(modelFile);
const bytes = fs.statSync(modelFile).size;
const goldens = await oracleGoldens({
  model: modelFile,
  fixture: name,
  weightType: "Q4_K_M",
  modelSha256: sha256,
  modelBytes: bytes,
  oracle,
  prompts: await parityPromptIds(modelFile),
});
const manifest: DefaultModelManifest = {
  format: DEFAULT_MODEL_MANIFEST_FORMAT,
  generatedBy: "scripts/goldens/default-model.ts",
  oracle,
  model: {
    name: String(getMetadata(header, "general.name") ?? ""),
    file: relativeToRepo(modelFile),
    weightType: "Q4_K_M",
    sha256,
    bytes,
    tensorTypes,
  },
  goldens: `${name}.json`,
  nTokens: GOLDENS_N_TOKENS,
  topK: GOLDENS_TOP_K,
};
const goldensFile = path.join(path.dirname(manifestFile), manifest.goldens);
const outputs: [string, string][] = [
  [goldensFile, serializeGoldens(goldens)],
  [manifestFile, `${JSON.stringify(manifest, null, 2)}\n`],
];
let mismatches = 0;
for (const [file, text] of outputs) {
  if (check) {
    const same = fs.existsSync(file) && fs.readFileSync(file, "utf8") === text;
    if (!same) mismatches++;
    console.log(`${relativeToRepo(file)}: ${same ? "identical" : "DIFFERS"}`);
  } else {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
    console.log(`wrote ${relativeToRepo(file)}`);
  }
}
console.log(`${name}: ${bytes} B, sha256 ${sha256}, ${JSON.stringify(tensorTypes)}, oracle ${oracle.llamaVersion} (${oracle.cpuVariant})`);
process.exit(mismatches === 0 ? 0 : 1);
