/**
 * Step 3 of the recipe: trained weights -> GGUF files.
 *
 *   pnpm --filter @keepquant/train exec tsx src/release.ts [--out <dir>]
 *
 * Reads weights.kqtw (written by train.py) and vocab.json from the work folder, writes with our own
 * GGUF writer the F32 file, then quantizes it with our own quantizers (quantizeGgufModel: llama.cpp's
 * Q4_K_M type mix, byte-identical to llama_model_quantize) to Q8_0 and Q4_K_M. Writes
 * release.json (sha256, bytes and tensor types of each file, training summary) next to them.
 * The shipped default is the Q4_K_M file.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { ggmlTypeName, readGguf } from "@keepquant/gguf";
import { quantizeGgufModel, type LlamaFileType } from "@keepquant/quant";
import { exportGguf, writeFileAtomic } from "./export-gguf.js";
import { WORK_DIR, readRecipe } from "./recipe.js";
import { readTensorFile } from "./tensor-file.js";

export interface ReleaseFile {
  file: string;
  weightType: "F32" | LlamaFileType;
  sha256: string;
  bytes: number;
  tensorTypes: Record<string, number>;
}

export function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

export async function tensorTypeCounts(bytes: Uint8Array): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const tensor of (await readGguf(bytes)).tensors) {
    const name = ggmlTypeName(tensor.type);
    counts[name] = (counts[name] ?? 0) + 1;
  }
  return counts;
}

async function main(): Promise<void> {
  const at = process.argv.indexOf("--out");
  const out = at > 0 ? path.resolve(process.argv[at + 1]!) : WORK_DIR;
  const recipe = readRecipe();
  const vocab = JSON.parse(fs.readFileSync(path.join(WORK_DIR, "vocab.json"), "utf8")) as unknown;
  const { tensors, meta } = readTensorFile(path.join(WORK_DIR, "weights.kqtw"));
  fs.mkdirSync(out, { recursive: true });
  const f32 = exportGguf({
    name: recipe.name,
    shape: recipe.model,
    vocab,
    tensors,
    extraMetadata: {
      "general.description": `A small qwen35 trained by keepquant's tools/train on the fortune cookie files of Debian's ${recipe.corpus.packages.join(" and ")} packages (a collection under the BSD licence of the University of California, see /usr/share/doc/fortunes/copyright).`,
    },
  });
  const files: ReleaseFile[] = [];
  const emit = async (weightType: ReleaseFile["weightType"], bytes: Uint8Array): Promise<void> => {
    const file = `${recipe.name}-${weightType.toLowerCase()}.gguf`;
    writeFileAtomic(path.join(out, file), bytes);
    files.push({ file, weightType, sha256: sha256(bytes), bytes: bytes.length, tensorTypes: await tensorTypeCounts(bytes) });
  };
  await emit("F32", f32);
  for (const fileType of ["Q8_0", "Q4_K_M"] as const) await emit(fileType, (await quantizeGgufModel(f32, fileType)).bytes);
  const release = { recipe: recipe.name, training: meta, files };
  writeFileAtomic(path.join(out, "release.json"), `${JSON.stringify(release, null, 2)}\n`);
  for (const f of files) console.log(`${f.file}  ${f.bytes} B  sha256 ${f.sha256}  ${JSON.stringify(f.tensorTypes)}`);
}

await main();
