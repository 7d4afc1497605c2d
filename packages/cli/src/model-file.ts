/**
 * The model path a user names, checked once before anything reads it, by every command that takes a
 * model file (inspect, plan, run, chat, bench, serve, parity): the same path failure is the same error
 * line everywhere.
 *
 * | the path                                   | code                        |
 * |--------------------------------------------|-----------------------------|
 * | nothing there (also a dangling link)       | MODEL_NOT_FOUND             |
 * | a loop of symbolic links (ELOOP)           | MODEL_SYMLINK_LOOP          |
 * | unreadable, or a folder on it unsearchable | MODEL_PERMISSION_DENIED     |
 * | a directory, FIFO, device or socket        | GGUF_NOT_A_FILE (gguf's)    |
 * | any other failed stat                      | GGUF_IO (gguf's)            |
 *
 * Everything comes from stat, lstat, readlink and access: nothing is opened (opening a FIFO blocks).
 */
import fs from "node:fs/promises";
import { assertRegularFile, GgufIoError } from "@keepquant/gguf";

export type ModelFileErrorCode = "MODEL_NOT_FOUND" | "MODEL_SYMLINK_LOOP" | "MODEL_PERMISSION_DENIED";

/** A model path that leads to no readable file. `field` is the path (the JSON error document's `field`). */
export class ModelFileError extends Error {
  readonly code: ModelFileErrorCode;
  readonly field: string;
  constructor(code: ModelFileErrorCode, path: string, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "ModelFileError";
    this.code = code;
    this.field = path;
  }
}

function errnoCode(error: unknown): string | undefined {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === "string" ? code : undefined;
}

/** MODEL_NOT_FOUND for ENOENT / ENOTDIR, saying why when the path is a dangling link or runs through a file. */
async function notFound(path: string, code: "ENOENT" | "ENOTDIR", cause: unknown): Promise<ModelFileError> {
  let why = "";
  if (code === "ENOTDIR") why = " (a part of the path before the file name is not a directory)";
  else {
    const target = await fs.readlink(path).catch(() => undefined);
    if (target !== undefined) why = ` (a symbolic link to ${target}, which does not exist)`;
  }
  return new ModelFileError("MODEL_NOT_FOUND", path, `model file not found: ${path}${why}`, cause);
}

function permissionDenied(path: string, what: string, cause: unknown): ModelFileError {
  return new ModelFileError(
    "MODEL_PERMISSION_DENIED",
    path,
    `${path}: permission denied (${errnoCode(cause) ?? "EACCES"}): ${what}`,
    cause,
  );
}

/** The ModelFileError for a path that `stat` refused with `error`, or undefined for a failure it does not name. */
async function describeStatFailure(path: string, error: unknown): Promise<ModelFileError | undefined> {
  switch (errnoCode(error)) {
    case "ENOENT":
      return notFound(path, "ENOENT", error);
    case "ENOTDIR":
      return notFound(path, "ENOTDIR", error);
    case "ELOOP":
      return new ModelFileError(
        "MODEL_SYMLINK_LOOP",
        path,
        `${path} is a loop of symbolic links (ELOOP): following them never reaches a file (or takes more links than the system follows)`,
        error,
      );
    case "EACCES":
    case "EPERM":
      return permissionDenied(path, "this user cannot search a directory on the path", error);
    default:
      return undefined;
  }
}

/**
 * Checks a model path the user named: a ModelFileError (MODEL_NOT_FOUND, MODEL_SYMLINK_LOOP,
 * MODEL_PERMISSION_DENIED) or gguf's GGUF_NOT_A_FILE / GGUF_IO when it does not lead to a readable regular file.
 */
export async function checkModelFile(path: string): Promise<void> {
  try {
    await fs.stat(path);
  } catch (error) {
    const described = await describeStatFailure(path, error);
    if (described) throw described;
  }
  // a directory, FIFO, device or socket: GGUF_NOT_A_FILE (and any other failed stat GGUF_IO), as gguf's readers say it
  await assertRegularFile(path);
  try {
    await fs.access(path, fs.constants.R_OK);
  } catch (error) {
    const code = errnoCode(error);
    if (code === "EACCES" || code === "EPERM") throw permissionDenied(path, "this user cannot read the file", error);
    throw new GgufIoError(`cannot read ${path}: ${code ?? String(error)}`, { cause: error, field: path });
  }
}

/** True for the ModelFileError of a path where nothing is (parity skips such a model instead of failing). */
export function isModelNotFound(error: unknown): error is ModelFileError {
  return error instanceof ModelFileError && error.code === "MODEL_NOT_FOUND";
}
