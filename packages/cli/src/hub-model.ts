/**
 * `hf:<owner>/<repo>[:<quant or file>][@<revision>]` wherever a command takes a model file: the model is found
 * in the Hugging Face cache or downloaded into it (progress on stderr, Ctrl-C keeps a resumable partial), then
 * checked like any path. `plan` and `inspect` read a model that is not cached by Range requests instead.
 */
import { resolveModelFile } from "@keepquant/engine";
import { readGgufModel, type GgufFile } from "@keepquant/gguf";
import { HubError, isHubReference, readHubModelHeader, resolveHubModel } from "@keepquant/hub";
import type { CommandIo } from "./command.js";
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
 * The model header `plan` and `inspect` read: from a checked path (every shard of a split model), from the cache
 * for an `hf:` model there, or (when it is not cached) from the Hub files themselves by Range requests, nothing
 * downloaded.
 */
export async function readModelHeader(model: string, io: CommandIo): Promise<GgufFile> {
  if (!isHubReference(model)) {
    await checkModelFile(model);
    return readGgufModel(model);
  }
  return readHubModelHeader(await resolveHubModel(model, { env: io.env }), { env: io.env });
}
