/**
 * The default model's parity manifest, `goldens/default-model/manifest.json`: which file the goldens
 * were made from (repo-relative path, sha256, bytes, tensor types) and the oracle that made them.
 * Unlike the fixtures, the default model is a trained file that cannot be regenerated in CI (its
 * recipe is tools/train), so the file itself is committed and pinned here.
 */
import fs from "node:fs";
import path from "node:path";
import { ParityError } from "./errors.js";
import type { ParityOracleInfo } from "./goldens.js";

export const DEFAULT_MODEL_MANIFEST_FORMAT = "keepquant-default-model-parity/1";

export interface DefaultModelManifest {
  format: typeof DEFAULT_MODEL_MANIFEST_FORMAT;
  generatedBy: string;
  oracle: ParityOracleInfo;
  model: {
    name: string;
    /** Repo-relative path of the GGUF file. */
    file: string;
    weightType: string;
    sha256: string;
    bytes: number;
    tensorTypes: Record<string, number>;
  };
  /** Goldens file name next to the manifest. */
  goldens: string;
  nTokens: number;
  topK: number;
}

/** `<repo>/goldens/default-model`. */
export function defaultModelGoldensDir(repoRoot: string): string {
  return path.join(repoRoot, "goldens", "default-model");
}

export function readDefaultModelManifest(file: string): DefaultModelManifest {
  if (!fs.existsSync(file)) throw new ParityError("PARITY_GOLDENS_NOT_FOUND", `default model parity manifest not found: ${file}`);
  const json = JSON.parse(fs.readFileSync(file, "utf8")) as DefaultModelManifest;
  if (
    json.format !== DEFAULT_MODEL_MANIFEST_FORMAT ||
    typeof json.model?.file !== "string" ||
    !/^[0-9a-f]{64}$/.test(json.model.sha256 ?? "")
  ) {
    throw new ParityError(
      "PARITY_BAD_GOLDENS",
      `${file}: format ${String(json.format)}, expected ${DEFAULT_MODEL_MANIFEST_FORMAT} with model.file and model.sha256`,
    );
  }
  return json;
}
