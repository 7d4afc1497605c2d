/** The parity manifest, `goldens/parity/manifest.json`: what the goldens were made from. */
import fs from "node:fs";
import { ParityError } from "./errors.js";
import type { ParityOracleInfo } from "./goldens.js";

export const PARITY_MANIFEST_FORMAT = "keepquant-parity-manifest/1";

export interface ParityManifestFixture {
  name: string;
  model: string;
  weightType: string;
  /** File name inside the fixture cache folder. */
  file: string;
  sha256: string;
  bytes: number;
  /** Goldens file name next to the manifest. */
  goldens: string;
  /** Tensor count per ggml type name in the file, e.g. { F32: 30, Q4_K: 20, Q6_K: 4 }. */
  tensorTypes: Record<string, number>;
}

export interface ParityPrompt {
  /** Text tokenized by the oracle (no BOS, special tokens parsed), or... */
  text?: string;
  /** ...fixed token ids. */
  ids?: number[];
}

export interface ParityManifest {
  format: typeof PARITY_MANIFEST_FORMAT;
  generatedBy: string;
  oracle: ParityOracleInfo;
  tokenizer: { file: string; sha256: string };
  nTokens: number;
  topK: number;
  prompts: ParityPrompt[];
  fixtures: ParityManifestFixture[];
}

export function readParityManifest(file: string): ParityManifest {
  if (!fs.existsSync(file)) throw new ParityError("PARITY_GOLDENS_NOT_FOUND", `parity manifest not found: ${file}`);
  const json = JSON.parse(fs.readFileSync(file, "utf8")) as ParityManifest;
  if (json.format !== PARITY_MANIFEST_FORMAT || !Array.isArray(json.fixtures)) {
    throw new ParityError("PARITY_BAD_GOLDENS", `${file}: format ${String(json.format)}, expected ${PARITY_MANIFEST_FORMAT}`);
  }
  return json;
}

/** The 16 fixed prompts: prose, code, numbers, Unicode, whitespace runs, chat markup, raw ids. */
export const PARITY_PROMPTS: readonly ParityPrompt[] = [
  { text: "The quick brown fox jumps over the lazy dog." },
  { text: "Once upon a time" },
  { text: "## Installation\n\nRun `npm install` and then" },
  { text: "function add(a, b) {\n  return a + b;\n}\n" },
  { text: 'import { readFile } from "node:fs/promises";\n\nconst data = await' },
  { text: "Copyright (c) 2024 The Authors. Permission is hereby granted, free of charge," },
  { text: "1, 2, 3, 5, 8, 13, 21," },
  { text: "Größe, café, naïve, 東京, 😀 and" },
  { text: "    indented    with   runs\t\tof\n\n\nwhitespace" },
  { text: "<|im_start|>user\nWhat is a GGUF file?<|im_end|>\n<|im_start|>assistant\n" },
  { text: 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' },
  { text: "x" },
  { text: "https://github.com/example/repo/blob/main/README.md#usage" },
  { text: "if (error) throw new Error(`failed: ${error.message}`);" },
  { ids: [42] },
  { ids: [100, 2000, 300, 4000, 50, 600, 1700, 800, 900, 1000, 1100, 1200, 1300, 1400, 1500, 1600] },
];
