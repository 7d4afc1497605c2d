/**
 * The model an application names: a GGUF path, or an `hf:<owner>/<repo>[:<quant or file>][@<revision>]`
 * reference that @keepquant/hub resolves in the Hugging Face cache (downloading it when missing). A split GGUF
 * (`-00001-of-00003.gguf` shards, `split.count` > 1) is refused by name: the reader loads one file.
 */
import { getMetadata, type GgufFile } from "@keepquant/gguf";
import { ensureHubModel, isHubReference, type DownloadOptions } from "@keepquant/hub";
import { EngineLoadError } from "./errors.js";

export { isHubReference };

function splitError(name: string, shards: number, first: string): EngineLoadError {
  return new EngineLoadError(
    "ENGINE_SPLIT_GGUF",
    `${name} is a split GGUF of ${shards} shards; keepquant loads one GGUF file: merge the shards with llama.cpp's \`llama-gguf-split --merge ${first} merged.gguf\` and load merged.gguf`,
    { field: "model" },
  );
}

/**
 * The local file of `model`: the path itself, or for an `hf:` reference the first shard in the Hugging Face
 * cache, fetched when missing (every shard, and the companions `hub.mmproj` / `hub.mtp` ask for). A split model
 * is downloaded whole and then refused with ENGINE_SPLIT_GGUF.
 */
export async function resolveModelFile(model: string, hub: DownloadOptions = {}): Promise<string> {
  if (!isHubReference(model)) return model;
  const resolved = await ensureHubModel(model, hub);
  const files = resolved.model.files;
  if (files.length > 1) throw splitError(resolved.name, files.length, files[0]!.localPath);
  return files[0]!.localPath;
}

/** Refuses the header of one shard of a split GGUF (`split.count` > 1). */
export function assertNotSplit(file: Pick<GgufFile, "metadata">, path: string): void {
  const count = getMetadata(file, "split.count");
  if (typeof count === "number" && count > 1) throw splitError(path, count, path);
  if (typeof count === "bigint" && count > 1n) throw splitError(path, Number(count), path);
}
