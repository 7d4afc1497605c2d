/**
 * The embedded default model lives in its own package, `@keepquant/default-model` (an optional peer
 * dependency): imported by name at run time so that the engine works without it.
 */
import { EngineLoadError } from "./errors.js";

type DefaultModelPackage = typeof import("@keepquant/default-model");

const DEFAULT_MODEL_PACKAGE = "@keepquant/default-model";

/** The verified path of the default model; EngineLoadError ENGINE_NO_DEFAULT_MODEL when it is absent or corrupt. */
export async function defaultModelPath(): Promise<string> {
  let loaded: DefaultModelPackage;
  try {
    loaded = (await import(DEFAULT_MODEL_PACKAGE)) as DefaultModelPackage;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    const reason = code === "ERR_MODULE_NOT_FOUND" ? "it is not installed" : (error as Error).message;
    throw new EngineLoadError(
      "ENGINE_NO_DEFAULT_MODEL",
      `the default model needs the package ${DEFAULT_MODEL_PACKAGE} (${reason}): npm install ${DEFAULT_MODEL_PACKAGE}, or load a GGUF file with Engine.load(path)`,
      { cause: error },
    );
  }
  try {
    return await loaded.defaultModelPath();
  } catch (error) {
    throw new EngineLoadError("ENGINE_NO_DEFAULT_MODEL", `${DEFAULT_MODEL_PACKAGE}: ${(error as Error).message}`, { cause: error });
  }
}
