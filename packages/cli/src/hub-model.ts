/**
 * `hf:<owner>/<repo>[:<quant or file>][@<revision>]` wherever a command takes a model file: the model is found
 * in the Hugging Face cache or downloaded into it (progress on stderr, Ctrl-C keeps a resumable partial), then
 * checked like any path. `plan` and `inspect` read a model that is not cached by Range requests instead.
 */
import { resolveModelFile } from "@keepquant/engine";
import type { GgufByteSource } from "@keepquant/gguf";
import { HubError, isHubReference, remoteModelSource, resolveHubModel } from "@keepquant/hub";
import { write, type CommandIo } from "./command.js";
import { downloadProgress } from "./download-progress.js";
import { checkModelFile } from "./model-file.js";

/** Runs `work` with an AbortSignal that Ctrl-C (SIGINT) aborts; the handler is removed afterwards. */
export async function abortableBySigint<T>(work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const onSigint = (): void => controller.abort(new Error("interrupted (SIGINT)"));
  process.once("SIGINT", onSigint);
  try {
    return await work(controller.signal);
  } finally {
    process.removeListener("SIGINT", onSigint);
  }
}

/** Adds what to do to an interrupted download's error. */
export function explainAbort(error: unknown): unknown {
  if (HubError.isInstance(error) && error.code === "HUB_ABORTED") {
    return new HubError("HUB_ABORTED", `${error.message}: the partial download is kept; run the same command again to resume it`, {
      field: error.field,
    });
  }
  return error;
}

/** The local file a command's model argument names: a checked path, or an `hf:` model fetched when missing. */
export async function localModelFile(model: string, io: CommandIo): Promise<string> {
  if (isHubReference(model)) {
    const progress = downloadProgress(io);
    try {
      model = await abortableBySigint((signal) => resolveModelFile(model, { env: io.env, signal, onProgress: progress.onProgress }));
      progress.finish();
    } catch (error) {
      progress.abandon();
      throw explainAbort(error);
    }
  }
  await checkModelFile(model);
  return model;
}

/**
 * What `plan` and `inspect` read a header from: a checked path, the cached file of an `hf:` model, or (when
 * it is not cached) the Hub file itself read by Range requests, nothing downloaded.
 */
export async function modelHeaderSource(model: string, io: CommandIo): Promise<string | GgufByteSource> {
  if (!isHubReference(model)) {
    await checkModelFile(model);
    return model;
  }
  const resolved = await resolveHubModel(model, { env: io.env });
  const first = resolved.model.files[0]!;
  if (first.cached) return first.localPath;
  if (resolved.model.files.length > 1)
    write(io.stderr, `note: ${resolved.name} is split in ${resolved.model.files.length} shards; reading the first`);
  return remoteModelSource(resolved, { env: io.env });
}
