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
import { ORACLE_PACKAGE, ORACLE_VERSION, decodeF32, runOracle } from "../../tools/oracle/src/index.js";
import { sha256File } from "../../packages/engine/src/parity/fixtures.js";
import { goldensFromOracleRun, serializeGoldens, type ParityOracleInfo } from "../../packages/engine/src/parity/goldens.js";
import {
  defaultModelGoldensDir,
  DEFAULT_MODEL_MANIFEST_FORMAT,
  readDefaultModelManifest,
  type DefaultModelManifest,
} from "../../packages/engine/src/parity/default-model-manifest.js";
import { PARITY_PROMPTS } from "../../packages/engine/src/parity/manifest.js";
import { readGguf, ggmlTypeName, getMetadata } from "../../packages/gguf/src/index.js";
import { REPO_ROOT, relativeToRepo } from "../fixtures/common.js";

const N_TOKENS = 16;
const TOP_K = 64;
const THREADS = 1;
const check = process.argv.includes("--check");
const modelArg = process.argv.indexOf("--model");
const manifestFile = path.join(defaultModelGoldensDir(REPO_ROOT), "manifest.json");
const previous = fs.existsSync(manifestFile) ? readDefaultModelManifest(manifestFile) : undefined;
const modelFile = modelArg > 0 ? path.resolve(process.argv[modelArg + 1]!) : previous ? path.join(REPO_ROOT, previous.model.file) : undefined;
if (!modelFile || !fs.existsSync(modelFile)) {
  console.error(`default model file not found (${modelFile ?? "no manifest and no --model"})`);
  process.exit(1);
}

const header = await readGguf(modelFile);
const tensorTypes: Record<string, number> = {};
for (const tensor of header.tensors) tensorTypes[ggmlTypeName(tensor.type)] = (tensorTypes[ggmlTypeName(tensor.type)] ?? 0) + 1;
const info = await runOracle({ kind: "info", model: modelFile });
const oracle: ParityOracleInfo = {
  package: ORACLE_PACKAGE,
  version: ORACLE_VERSION,
  llamaVersion: info.version,
  cpuVariant: info.cpuVariant,
  settings: { kvType: "f32", repack: false, flashAttention: false, threads: THREADS },
};
const texts = PARITY_PROMPTS.flatMap((p) => (p.text === undefined ? [] : [p.text]));
const tokenized = await runOracle({ kind: "tokenize", model: modelFile, texts, addSpecial: false, parseSpecial: true });
let textIndex = 0;
const promptIds = PARITY_PROMPTS.map((p) => (p.text === undefined ? p.ids! : tokenized.tokens[textIndex++]!));
const result = await runOracle({
  kind: "greedy",
  model: modelFile,
  prompts: promptIds,
  nTokens: N_TOKENS,
  withLogits: true,
  threads: THREADS,
  repack: false,
  kvType: "f32",
});
const name = "default-q4_k_m";
const sha256 = sha256File(modelFile);
const bytes = fs.statSync(modelFile).size;
const goldens = goldensFromOracleRun({
  fixture: name,
  weightType: "Q4_K_M",
  modelSha256: sha256,
  modelBytes: bytes,
  oracle,
  topK: TOP_K,
  prompts: promptIds.map((ids, p) => {
    const text = PARITY_PROMPTS[p]!.text;
    return text === undefined ? { ids } : { ids, text };
  }),
  runs: result.tokens.map((tokens, p) => ({ tokens, logits: result.logits![p]!.map(decodeF32) })),
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
  nTokens: N_TOKENS,
  topK: TOP_K,
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
