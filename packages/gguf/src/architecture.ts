/**
 * One model architecture as the package knows it: how its hyperparameters are read from a file's
 * metadata, how they become the model description (layers of registered kinds, tensors, named
 * dimensions), and the layer kinds it brings. Each architecture lives in its own folder and exports
 * one of these; registering it (../architectures.ts) registers its kinds.
 */
import type { ArchitectureKinds } from "./layer-kind.js";
import type { Qwen35Config } from "./qwen35/config.js";
import type { ModelDescription } from "./qwen35/tensors.js";
import type { GgufFile } from "./types.js";

export interface ModelArchitecture {
  /** `general.architecture` */
  readonly name: string;
  /** The typed, validated hyperparameters; throws a typed error naming the key. */
  parseConfig(file: Pick<GgufFile, "metadata">): Qwen35Config;
  /** The model as data for this config and vocabulary. */
  describe(config: Qwen35Config, vocab: number): ModelDescription;
  /** The layer kinds this folder brings (none when it reuses another folder's). */
  readonly kinds: ArchitectureKinds;
}
