/**
 * Images from the command line (`run --image`, chat's `/image`), as llama.cpp's mtmd-cli takes them: a
 * vision projector (`--mmproj FILE`, a path or an `hf:` repository's mmproj-*.gguf) loaded beside the model,
 * the image files read here, encoded by the engine, and placed in the user message before its text through
 * the chat template (`encodeMultimodalChat`).
 */
import fs from "node:fs/promises";
import {
  type EncodedImage,
  type Engine,
  EngineError,
  encodeMultimodalChat,
  type MultimodalChatMessage,
  type MultimodalPrompt,
  type Tokenizer,
} from "@keepquant/engine";
import { ensureHubProjector, isHubReference } from "@keepquant/hub";
import { CliUsageError, type CommandIo } from "../command.js";
import { downloadProgress } from "../download-progress.js";
import { abortableBySigint, explainAbort } from "../hub-model.js";
import { checkModelFile, ModelFileError } from "../model-file.js";

/** The option declarations `run` and `chat` share (node:util parseArgs). */
export const VISION_OPTIONS = {
  mmproj: { type: "string" },
  provider: { type: "string" },
} as const;

export const VISION_OPTIONS_HELP: readonly string[] = [
  "--mmproj FILE         a vision projector (mmproj-*.gguf, or hf:<owner>/<repo>[:<quant>] for the repository's) loaded beside the model",
  "--provider auto|ts    auto (default): the native step; ts: the TypeScript forward (the specification, slow)",
];

/**
 * Most bytes of an image file read (64 MiB): far above any photo, and the engine's decode limits (pixels,
 * dimensions) then refuse what it cannot take, naming the limit.
 */
export const MAX_IMAGE_FILE_BYTES = 64 << 20;

/** `--provider`: the engine's `provider` option (undefined when not given). */
export function parseProvider(text: string | undefined): "auto" | "ts" | undefined {
  if (text === undefined) return undefined;
  if (text !== "auto" && text !== "ts") throw new CliUsageError(`--provider ${JSON.stringify(text)}: expected auto or ts`);
  return text;
}

/** The usage error of an image asked of a model started without a projector. */
export function noProjectorError(what: string): CliUsageError {
  return new CliUsageError(`${what} needs a vision projector: pass --mmproj FILE (the model's mmproj-*.gguf) to load one beside the model`);
}

/**
 * The projector file `--mmproj` names: a checked path, or for `hf:<owner>/<repo>[:<quant>]` the repository's
 * `mmproj-*.gguf`, from the Hugging Face cache or downloaded into it (the model's own files are not fetched).
 */
export async function localProjectorFile(value: string, io: CommandIo): Promise<string> {
  if (isHubReference(value)) {
    const progress = downloadProgress(io);
    try {
      const file = await abortableBySigint((signal) => ensureHubProjector(value, { env: io.env, signal, onProgress: progress.onProgress }));
      progress.finish();
      return file;
    } catch (error) {
      progress.abandon();
      throw explainAbort(error);
    }
  }
  try {
    await checkModelFile(value);
  } catch (error) {
    if (error instanceof ModelFileError)
      throw new ModelFileError(error.code, value, `--mmproj: ${error.message.replace(/^model file/, "file")}`);
    throw error;
  }
  return value;
}

/** An image file that cannot be read (missing, a directory, too large): exit 1, the file named. */
export class ImageFileError extends Error {
  readonly code = "IMAGE_FILE";
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(message);
    this.name = "ImageFileError";
  }
}

/** Reads an image file's bytes (checked: a regular file of at most MAX_IMAGE_FILE_BYTES). */
export async function readImageFile(file: string): Promise<Uint8Array> {
  let size: number;
  try {
    const stat = await fs.stat(file);
    if (!stat.isFile()) throw new ImageFileError(file, `image ${file}: not a regular file`);
    size = stat.size;
  } catch (error) {
    if (error instanceof ImageFileError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    throw new ImageFileError(
      file,
      code === "ENOENT" ? `image file not found: ${file}` : `image ${file}: cannot read it (${code ?? String(error)})`,
    );
  }
  if (size > MAX_IMAGE_FILE_BYTES) throw new ImageFileError(file, `image ${file}: ${size} bytes, larger than ${MAX_IMAGE_FILE_BYTES}`);
  try {
    return new Uint8Array(await fs.readFile(file));
  } catch (error) {
    throw new ImageFileError(file, `image ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
}

/**
 * Encodes an image file's bytes with the engine's projector; an engine error (a bad image: ENGINE_BAD_IMAGE with
 * its reason) keeps its code and message, with the file named first.
 */
export async function encodeImageFile(engine: Engine, file: string, bytes: Uint8Array): Promise<EncodedImage> {
  try {
    return await engine.encodeImage(bytes);
  } catch (error) {
    if (EngineError.isInstance(error)) {
      throw Object.assign(new Error(`${file}: ${error.message}`, { cause: error }), { code: error.code });
    }
    throw error;
  }
}

/** A chat prompt with images, ready for `engine.generate`: its pieces, and its length in tokens (images included). */
export interface ImagePrompt {
  prompt: MultimodalPrompt;
  /** The rendered prompt text with `<image>` where each image sits. */
  text: string;
  /** The text pieces' token ids, in order (the images' tokens left out). */
  textIds: number[];
  tokens: number;
  /** How many images the prompt holds. */
  images: number;
}

/**
 * Encodes `messages` through the chat template and puts each image's encoding (from `encoded`, by the identity of
 * its bytes) in its slot.
 */
export function imageChatPrompt(
  tokenizer: Tokenizer,
  messages: readonly MultimodalChatMessage[],
  encoded: ReadonlyMap<Uint8Array, EncodedImage>,
): ImagePrompt {
  const chat = encodeMultimodalChat(tokenizer, messages);
  const textIds: number[] = [];
  let tokens = 0;
  const pieces = chat.pieces.map((piece) => {
    if (Array.isArray(piece)) {
      textIds.push(...piece);
      tokens += piece.length;
      return piece;
    }
    const image = encoded.get(chat.images[(piece as { image: number }).image]!);
    if (!image) throw new Error("an image of the conversation was not encoded");
    tokens += image.tokens;
    return image;
  });
  return { prompt: { pieces }, text: chat.text, textIds, tokens, images: chat.images.length };
}
