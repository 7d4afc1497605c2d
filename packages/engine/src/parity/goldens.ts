/**
 * The goldens format: what the oracle (llama.cpp) produced for one fixture model.
 *
 * One JSON file per fixture, `goldens/parity/<fixture>.json`. For every prompt: the oracle's greedy
 * tokens and, at every step, its top-K logits (ids and values) of the logit vector that chose the
 * step's token (teacher-forced along its own continuation). Float vectors are stored exactly as
 * base64 of little-endian f32 (ids as little-endian i32).
 */
import fs from "node:fs";
import path from "node:path";
import { ParityError } from "./errors.js";

export const PARITY_GOLDENS_FORMAT = "keepquant-parity-goldens/1";

export interface ParityOracleInfo {
  /** npm package that shipped the oracle binary, e.g. "@node-llama-cpp/linux-x64". */
  package: string;
  version: string;
  /** llama_version() of the binary. */
  llamaVersion: string;
  /** The ggml CPU backend variant that computed the goldens (pinned: "haswell", AVX2). */
  cpuVariant: string;
  /** Settings that make its decode deterministic. */
  settings: { kvType: "f32"; repack: false; flashAttention: false; threads: number };
}

export interface ParityPromptGolden {
  /** The text the ids came from (tokenized by the oracle), when the prompt was text. */
  text?: string;
  ids: number[];
  /** The oracle's greedy tokens (argmax, ties -> lowest id). */
  tokens: number[];
  /** Per step s: the oracle's top-K token ids at step s, by descending logit (ties -> lower id). */
  topIds: Int32Array[];
  /** Per step s: their logits. */
  topLogits: Float32Array[];
}

export interface ParityGoldens {
  format: typeof PARITY_GOLDENS_FORMAT;
  fixture: string;
  /** Weight type of the fixture file as named by the recipe: "F32", "Q8_0", "Q4_K_M". */
  weightType: string;
  /** sha256 (hex) of the model file the goldens were made from. */
  modelSha256: string;
  modelBytes: number;
  oracle: ParityOracleInfo;
  nTokens: number;
  topK: number;
  prompts: ParityPromptGolden[];
}

interface ParityPromptGoldenJson {
  text?: string;
  ids: number[];
  tokens: number[];
  topIds: string;
  topLogits: string;
}

interface ParityGoldensJson extends Omit<ParityGoldens, "prompts"> {
  prompts: ParityPromptGoldenJson[];
}

function toBase64(view: Int32Array | Float32Array): string {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString("base64");
}

function split<T extends Int32Array | Float32Array>(text: string, make: (n: number) => T, rows: number, where: string): T[] {
  const bytes = Buffer.from(text, "base64");
  const all = make(bytes.length / 4);
  new Uint8Array(all.buffer).set(bytes);
  if (rows === 0 || all.length % rows !== 0) {
    throw new ParityError("PARITY_BAD_GOLDENS", `${where}: ${all.length} values do not split into ${rows} steps`);
  }
  const width = all.length / rows;
  return Array.from({ length: rows }, (_, s) => all.subarray(s * width, (s + 1) * width) as T);
}

function concat<T extends Int32Array | Float32Array>(rows: T[], make: (n: number) => T): T {
  const out = make(rows.reduce((n, r) => n + r.length, 0));
  let at = 0;
  for (const row of rows) {
    out.set(row as never, at);
    at += row.length;
  }
  return out;
}

export function serializeGoldens(goldens: ParityGoldens): string {
  const json: ParityGoldensJson = {
    ...goldens,
    prompts: goldens.prompts.map((p) => ({
      ...(p.text === undefined ? {} : { text: p.text }),
      ids: p.ids,
      tokens: p.tokens,
      topIds: toBase64(concat(p.topIds, (n) => new Int32Array(n))),
      topLogits: toBase64(concat(p.topLogits, (n) => new Float32Array(n))),
    })),
  };
  return `${JSON.stringify(json, null, 1)}\n`;
}

export function parseGoldens(text: string, where = "goldens"): ParityGoldens {
  let json: ParityGoldensJson;
  try {
    json = JSON.parse(text) as ParityGoldensJson;
  } catch (error) {
    throw new ParityError("PARITY_BAD_GOLDENS", `${where}: not JSON (${(error as Error).message})`);
  }
  if (json.format !== PARITY_GOLDENS_FORMAT) {
    throw new ParityError("PARITY_BAD_GOLDENS", `${where}: format ${String(json.format)}, expected ${PARITY_GOLDENS_FORMAT}`);
  }
  if (!Array.isArray(json.prompts) || json.prompts.length === 0) {
    throw new ParityError("PARITY_BAD_GOLDENS", `${where}: no prompts`);
  }
  const prompts = json.prompts.map((p, i): ParityPromptGolden => {
    const at = `${where}: prompt ${i}`;
    if (!Array.isArray(p.ids) || p.ids.length === 0 || !Array.isArray(p.tokens) || p.tokens.length === 0) {
      throw new ParityError("PARITY_BAD_GOLDENS", `${at}: ids and tokens must be non-empty arrays`);
    }
    const topIds = split(p.topIds, (n) => new Int32Array(n), p.tokens.length, `${at} topIds`);
    const topLogits = split(p.topLogits, (n) => new Float32Array(n), p.tokens.length, `${at} topLogits`);
    return { ...(p.text === undefined ? {} : { text: p.text }), ids: p.ids, tokens: p.tokens, topIds, topLogits };
  });
  return { ...json, prompts };
}

/** The goldens file of `fixture` inside `dir`. */
export function goldensPath(dir: string, fixture: string): string {
  return path.join(dir, `${fixture}.json`);
}

export function readGoldensFile(file: string): ParityGoldens {
  if (!fs.existsSync(file)) throw new ParityError("PARITY_GOLDENS_NOT_FOUND", `goldens not found: ${file}`);
  return parseGoldens(fs.readFileSync(file, "utf8"), file);
}

/** Top-K of a logit vector: ids by descending logit, ties -> lower id. */
export function topK(logits: Float32Array, k: number): { ids: Int32Array; logits: Float32Array } {
  const order = Array.from({ length: logits.length }, (_, i) => i);
  order.sort((a, b) => logits[b]! - logits[a]! || a - b);
  const n = Math.min(k, logits.length);
  const ids = Int32Array.from(order.slice(0, n));
  return { ids, logits: Float32Array.from(ids, (i) => logits[i]!) };
}

/** Builds a fixture's goldens from the oracle's greedy run (tokens and full logits per step). */
export function goldensFromOracleRun(input: {
  fixture: string;
  weightType: string;
  modelSha256: string;
  modelBytes: number;
  oracle: ParityOracleInfo;
  topK: number;
  prompts: { ids: number[]; text?: string }[];
  /** Per prompt: the oracle's greedy tokens and the full logit vector of every step. */
  runs: { tokens: number[]; logits: Float32Array[] }[];
}): ParityGoldens {
  const nTokens = input.runs[0]?.tokens.length ?? 0;
  return {
    format: PARITY_GOLDENS_FORMAT,
    fixture: input.fixture,
    weightType: input.weightType,
    modelSha256: input.modelSha256,
    modelBytes: input.modelBytes,
    oracle: input.oracle,
    nTokens,
    topK: input.topK,
    prompts: input.prompts.map((prompt, p) => {
      const run = input.runs[p]!;
      const steps = run.logits.map((logits) => topK(logits, input.topK));
      return {
        ...(prompt.text === undefined ? {} : { text: prompt.text }),
        ids: prompt.ids,
        tokens: run.tokens,
        topIds: steps.map((s) => s.ids),
        topLogits: steps.map((s) => s.logits),
      };
    }),
  };
}
