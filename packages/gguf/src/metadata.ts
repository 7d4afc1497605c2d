import type { GgufFile, GgufMetadataEntry, GgufValue } from "./types.js";

/** The plain JS value of `key` (arrays as typed arrays or JS arrays), or undefined. */
export function getMetadata(file: Pick<GgufFile, "metadata">, key: string): GgufValue | undefined {
  return file.metadata.get(key)?.value;
}

/** The whole entry of `key` (type, item type, offset), or undefined. */
export function getMetadataEntry(file: Pick<GgufFile, "metadata">, key: string): GgufMetadataEntry | undefined {
  return file.metadata.get(key);
}

/** `general.architecture` when it is a string. */
export function getArchitecture(file: Pick<GgufFile, "metadata">): string | undefined {
  const value = getMetadata(file, "general.architecture");
  return typeof value === "string" ? value : undefined;
}
