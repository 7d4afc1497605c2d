/**
 * Dev-only (scripts/goldens and this package's tests): goldens from the oracle, llama.cpp
 * through the raw C API in a child process, with the settings every committed goldens file uses:
 * F32 K/V, CPU repacking off, flash attention off, 1 thread, batched prefill then one token per decode.
 */
import { ORACLE_PACKAGE, ORACLE_VERSION, decodeF32, runOracle } from "@keepquant/oracle";
import { goldensFromOracleRun, PARITY_PROMPTS, type ParityGoldens, type ParityOracleInfo } from "@keepquant/engine/parity";

export const GOLDENS_N_TOKENS = 16;
export const GOLDENS_TOP_K = 64;
export const GOLDENS_THREADS = 1;

/** The oracle's identity and settings, as recorded in goldens (its CPU variant read by loading `model`). */
export async function oracleGoldensInfo(model: string): Promise<ParityOracleInfo> {
  const info = await runOracle({ kind: "info", model });
  return {
    package: ORACLE_PACKAGE,
    version: ORACLE_VERSION,
    llamaVersion: info.version,
    cpuVariant: info.cpuVariant,
    settings: { kvType: "f32", repack: false, flashAttention: false, threads: GOLDENS_THREADS },
  };
}

/** PARITY_PROMPTS as ids: text prompts tokenized by the oracle with `model`'s vocabulary (no BOS, specials parsed). */
export async function parityPromptIds(model: string): Promise<{ ids: number[]; text?: string }[]> {
  const texts = PARITY_PROMPTS.flatMap((p) => (p.text === undefined ? [] : [p.text]));
  const tokenized = await runOracle({ kind: "tokenize", model, texts, addSpecial: false, parseSpecial: true });
  let next = 0;
  return PARITY_PROMPTS.map((p) => (p.text === undefined ? { ids: p.ids! } : { ids: tokenized.tokens[next++]!, text: p.text }));
}

/** The oracle's greedy tokens and top-K logits for `prompts` on `model`, as a goldens value. */
export async function oracleGoldens(input: {
  model: string;
  fixture: string;
  weightType: string;
  modelSha256: string;
  modelBytes: number;
  oracle: ParityOracleInfo;
  prompts: { ids: number[]; text?: string }[];
  nTokens?: number;
  topK?: number;
}): Promise<ParityGoldens> {
  const result = await runOracle({
    kind: "greedy",
    model: input.model,
    prompts: input.prompts.map((p) => p.ids),
    nTokens: input.nTokens ?? GOLDENS_N_TOKENS,
    withLogits: true,
    threads: input.oracle.settings.threads,
    repack: false,
    kvType: "f32",
  });
  return goldensFromOracleRun({
    fixture: input.fixture,
    weightType: input.weightType,
    modelSha256: input.modelSha256,
    modelBytes: input.modelBytes,
    oracle: input.oracle,
    topK: input.topK ?? GOLDENS_TOP_K,
    prompts: input.prompts.map((p) => (p.text === undefined ? { ids: p.ids } : { ids: p.ids, text: p.text })),
    runs: result.tokens.map((tokens, p) => ({ tokens, logits: result.logits![p]!.map(decodeF32) })),
  });
}

/** The committed goldens regenerated on `model` with their own prompts, settings and oracle record. */
export async function regenerateGoldens(model: string, committed: ParityGoldens): Promise<ParityGoldens> {
  return oracleGoldens({
    model,
    fixture: committed.fixture,
    weightType: committed.weightType,
    modelSha256: committed.modelSha256,
    modelBytes: committed.modelBytes,
    oracle: committed.oracle,
    prompts: committed.prompts,
    nTokens: committed.nTokens,
    topK: committed.topK,
  });
}
