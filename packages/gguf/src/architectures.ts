/**
 * The registry of architectures: one entry per architecture folder, which registers its layer kinds
 * too (./kinds.ts derives the kind tables from here). A file's `general.architecture` chooses its
 * entry; the load plan reads the config and the description through it.
 */
import type { ModelArchitecture } from "./architecture.js";
import { readArchitectureName } from "./architecture-key.js";
import { qwen35 } from "./qwen35/index.js";
import { qwen35moe } from "./qwen35moe/index.js";
import { qwen3 } from "./qwen3/index.js";
import type { GgufFile } from "./types.js";

export const ARCHITECTURES = {
  qwen35,
  qwen35moe,
  qwen3,
} as const satisfies Readonly<Record<string, ModelArchitecture>>;

/** The registered architecture of a file; a typed error names `general.architecture` otherwise. */
export function architectureOf(file: Pick<GgufFile, "metadata">): ModelArchitecture {
  const names = Object.keys(ARCHITECTURES) as (keyof typeof ARCHITECTURES)[];
  return ARCHITECTURES[readArchitectureName(file, names) as keyof typeof ARCHITECTURES];
}
