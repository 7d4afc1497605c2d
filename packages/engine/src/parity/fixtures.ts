/**
 * Parity fixtures: small deterministic qwen35 models (our synthesizer, calm init) in F32, and the
 * same files quantized by llama.cpp's own quantizer (Q8_0, Q4_K_M). Only the recipe is committed;
 * files are regenerated into a cache folder and checked bit-identical against the manifest's sha256.
 *
 * Shapes: hidden 256, Hk 2 < Hv 4, every matrix row a multiple of 256 (K-quants need it), so
 * Q4_K_M gives real Q4_K / Q6_K tensors instead of fallbacks.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { synthesizeQwen35, type Qwen35Spec } from "@keepquant/gguf";
import { ParityError } from "./errors.js";

export type FixtureWeightType = "F32" | "Q8_0" | "Q4_K_M";
export const FIXTURE_WEIGHT_TYPES: readonly FixtureWeightType[] = ["F32", "Q8_0", "Q4_K_M"];

/** A synthetic model shape; the vocabulary comes from the fixture tokenizer. */
export type ParityModelSpec = Omit<Qwen35Spec, "vocab" | "tokenizer">;

const BASE: ParityModelSpec = {
  hidden: 256,
  layers: 4,
  ffn: 512,
  heads: 4,
  headsKv: 2,
  headDim: 64,
  ssmGroups: 2,
  ssmHeads: 4,
  ssmStateSize: 64,
  convKernel: 4,
  ropeDims: 16,
  ropeSections: [3, 3, 2, 0],
  ropeTheta: 10_000_000,
  eps: 1e-6,
  contextLength: 4096,
  tied: true,
};

/** The fixture models: tied / untied head, with / without an MTP block, 4 and 6 layers. */
export const PARITY_MODELS: Readonly<Record<string, ParityModelSpec>> = {
  "tied-4l": { ...BASE, tied: true, layers: 4, seed: 101, name: "keepquant-parity-tied-4l" },
  "untied-mtp-6l": {
    ...BASE,
    tied: false,
    mtp: true,
    layers: 6,
    fullAttentionInterval: 3,
    seed: 202,
    name: "keepquant-parity-untied-mtp-6l",
  },
};

export interface ParityFixture {
  /** `<model>-<type>`, e.g. `tied-4l-q4_k_m`; also the goldens file name. */
  name: string;
  model: string;
  weightType: FixtureWeightType;
  file: string;
}

/** Every fixture: each model in each weight type. */
export const PARITY_FIXTURES: readonly ParityFixture[] = Object.keys(PARITY_MODELS).flatMap((model) =>
  FIXTURE_WEIGHT_TYPES.map((weightType) => {
    const name = `${model}-${weightType.toLowerCase()}`;
    return { name, model, weightType, file: `${name}.gguf` };
  }),
);

export function parityFixture(name: string): ParityFixture {
  const fixture = PARITY_FIXTURES.find((f) => f.name === name);
  if (!fixture) {
    throw new ParityError("PARITY_UNKNOWN_FIXTURE", `unknown fixture ${name} (known: ${PARITY_FIXTURES.map((f) => f.name).join(", ")})`);
  }
  return fixture;
}

/** The full synthesizer spec of a fixture model for a tokenizer. */
export function parityModelSpec(model: string, tokenizer: NonNullable<Qwen35Spec["tokenizer"]>): Qwen35Spec {
  const spec = PARITY_MODELS[model];
  if (!spec) throw new ParityError("PARITY_UNKNOWN_FIXTURE", `unknown fixture model ${model}`);
  return { ...spec, vocab: tokenizer.tokens.length, tokenizer };
}

/** Quantizes an F32 GGUF file with llama.cpp's quantizer (llama_model_quantize). */
export type FixtureQuantizer = (input: string, output: string, weightType: Exclude<FixtureWeightType, "F32">) => Promise<void>;

export interface EnsureFixtureOptions {
  cacheDir: string;
  tokenizer: NonNullable<Qwen35Spec["tokenizer"]>;
  /** Needed to (re)build quantized fixtures. */
  quantize?: FixtureQuantizer;
  /** Expected sha256 per fixture name (from the manifest); a mismatch throws PARITY_FIXTURE_MISMATCH. */
  expectedSha256?: Readonly<Record<string, string>>;
}

export function sha256File(file: string): string {
  return createHash("sha256").update(fs.readFileSync(file)).digest("hex");
}

/**
 * The path of `fixture` in the cache, generating it (and its F32 parent) when absent. With
 * `expectedSha256`, a cached file with another hash is regenerated once, and a fresh file with
 * another hash is an error (the recipe or the quantizer changed).
 */
export async function ensureFixture(fixture: ParityFixture, options: EnsureFixtureOptions): Promise<string> {
  const file = path.join(options.cacheDir, fixture.file);
  const expected = options.expectedSha256?.[fixture.name];
  if (fs.existsSync(file) && (expected === undefined || sha256File(file) === expected)) return file;
  fs.mkdirSync(options.cacheDir, { recursive: true });
  const temporary = `${file}.tmp-${process.pid}`;
  try {
    if (fixture.weightType === "F32") {
      fs.writeFileSync(temporary, synthesizeQwen35(parityModelSpec(fixture.model, options.tokenizer)));
    } else {
      if (!options.quantize) {
        throw new ParityError("PARITY_NO_QUANTIZER", `fixture ${fixture.name} needs llama.cpp's quantizer, which is not available`);
      }
      const parent = PARITY_FIXTURES.find((f) => f.model === fixture.model && f.weightType === "F32")!;
      const f32 = await ensureFixture(parent, options);
      await options.quantize(f32, temporary, fixture.weightType);
    }
    const actual = sha256File(temporary);
    if (expected !== undefined && actual !== expected) {
      throw new ParityError(
        "PARITY_FIXTURE_MISMATCH",
        `fixture ${fixture.name} regenerated with sha256 ${actual}, the manifest pins ${expected}: the recipe, the tokenizer or the quantizer changed`,
      );
    }
    fs.renameSync(temporary, file);
    return file;
  } finally {
    fs.rmSync(temporary, { force: true });
  }
}

/** The fixture vocabulary file (`goldens/tokenizer/vocab.json`, format keepquant-bpe-vocab/1) as a synthesizer tokenizer. */
export function fixtureTokenizerFromJson(json: unknown): NonNullable<Qwen35Spec["tokenizer"]> {
  const vocab = json as {
    format?: string;
    model?: string;
    pre?: string;
    addBos?: boolean;
    specials?: { bos?: number; eos?: number; eot?: number; pad?: number };
    tokens?: string[];
    tokenTypes?: number[];
    merges?: string[];
    chatTemplate?: string;
  };
  if (vocab.format !== "keepquant-bpe-vocab/1" || !Array.isArray(vocab.tokens)) {
    throw new ParityError(
      "PARITY_BAD_GOLDENS",
      `fixture vocabulary: format ${String(vocab.format)}, expected keepquant-bpe-vocab/1 with tokens`,
    );
  }
  const specials = vocab.specials ?? {};
  return {
    model: vocab.model ?? "gpt2",
    pre: vocab.pre ?? "qwen35",
    tokens: vocab.tokens,
    ...(vocab.tokenTypes ? { tokenTypes: vocab.tokenTypes } : {}),
    merges: vocab.merges ?? [],
    ...(specials.bos === undefined ? {} : { bosId: specials.bos }),
    ...(specials.eos === undefined ? {} : { eosId: specials.eos }),
    ...((specials.eot ?? specials.eos) === undefined ? {} : { eotId: (specials.eot ?? specials.eos)! }),
    ...(specials.pad === undefined ? {} : { padId: specials.pad }),
    addBosToken: vocab.addBos ?? false,
    ...(vocab.chatTemplate === undefined ? {} : { chatTemplate: vocab.chatTemplate }),
  };
}
