/**
 * The model an application names: a GGUF path, or an `hf:<owner>/<repo>[:<quant or file>][@<revision>]`
 * reference that @keepquant/hub resolves in the Hugging Face cache (downloading it when missing). A split GGUF
 * (`-00001-of-00003.gguf` shards) is named by its first shard: `readGgufModel` finds the others beside it.
 */
import { ensureHubModel, isHubReference as isHubReferenceText } from "@keepquant/hub";
import type { AbortSignalLike, HubLoadOptions } from "./engine-types.js";

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

/**
 * The local file of `model`: the path itself, or for an `hf:` reference the first shard in the Hugging Face
 * cache, fetched when missing (every shard, and the companions `hub.mmproj` / `hub.mtp` ask for).
 */
export async function resolveModelFile(model: string, hub: HubLoadOptions = {}): Promise<string> {
  if (!isHubReference(model)) return model;
  const resolved = await ensureHubModel(model, { ...hub, signal: abortSignalOf(hub.signal) });
  return resolved.model.files[0]!.localPath;
}
