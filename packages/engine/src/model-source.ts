/**
 * The model an application names: a GGUF path, or an `hf:<owner>/<repo>[:<quant or file>][@<revision>]`
 * reference that @keepquant/hub resolves in the Hugging Face cache (downloading it when missing). A split GGUF
 * (`-00001-of-00003.gguf` shards, `split.count` > 1) is refused by name: the reader loads one file.
 */
import { getMetadata, type GgufFile } from "@keepquant/gguf";
import { ensureHubModel, isHubReference as isHubReferenceText } from "@keepquant/hub";
import type { AbortSignalLike, HubLoadOptions } from "./engine-types.js";
import { EngineLoadError } from "./errors.js";

/** True for an `hf:<owner>/<repo>[:<quant>][@<revision>]` model reference (rather than a path). */
export function isHubReference(model: string): boolean {
  return isHubReferenceText(model);
}

/** A real AbortSignal that follows `like` (the download composes signals, which needs real ones). */
function abortSignalOf(like: AbortSignalLike | undefined): AbortSignal | undefined {
  if (like === undefined || like instanceof AbortSignal) return like;
  const controller = new AbortController();
  if (like.aborted) controller.abort();
  else like.addEventListener("abort", () => controller.abort(), { once: true });
  return controller.signal;
}

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
export async function resolveModelFile(model: string, hub: HubLoadOptions = {}): Promise<string> {
  if (!isHubReference(model)) return model;
  const resolved = await ensureHubModel(model, { ...hub, signal: abortSignalOf(hub.signal) });
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
