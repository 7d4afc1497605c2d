import { Qwen35ConfigError } from "./errors.js";
import type { GgufFile, GgufMetadataEntry } from "./types.js";
import { GgufValueType, ggufValueTypeName } from "./value-type.js";

const quotedList = (names: readonly string[]): string => names.map((n) => JSON.stringify(n)).join(" or ");

/** A metadata entry as an error shows it: its type and (the start of) its value. */
export function describeEntry(entry: GgufMetadataEntry): string {
  if (entry.type === GgufValueType.ARRAY) {
    const n = (entry.value as ArrayLike<unknown>).length;
    return `${ggufValueTypeName(entry.itemType ?? GgufValueType.ARRAY)}[${n}]`;
  }
  const shown = typeof entry.value === "string" ? JSON.stringify(entry.value.slice(0, 40)) : String(entry.value);
  return `${ggufValueTypeName(entry.type)} ${shown}`;
}

/**
 * `general.architecture` when it is one of `accepted`; otherwise a typed error naming the key, what
 * it holds and the accepted names (missing, not a string, or another architecture).
 */
export function readArchitectureName(file: Pick<GgufFile, "metadata">, accepted: readonly string[]): string {
  const key = "general.architecture";
  const entry = file.metadata.get(key);
  if (!entry) {
    throw new Qwen35ConfigError("QWEN35_MISSING_KEY", `${key}: required key is missing (expected str ${quotedList(accepted)})`, {
      field: key,
    });
  }
  if (entry.type !== GgufValueType.STRING) {
    throw new Qwen35ConfigError(
      "QWEN35_BAD_KEY_TYPE",
      `${key}: expected str, found ${describeEntry(entry)}${entry.offset !== undefined ? ` (at offset ${entry.offset})` : ""}`,
      { field: key, offset: entry.offset },
    );
  }
  const name = entry.value as string;
  if (!accepted.includes(name)) {
    throw new Qwen35ConfigError("QWEN35_WRONG_ARCHITECTURE", `${key} is ${JSON.stringify(name)}, expected ${quotedList(accepted)}`, {
      field: key,
      offset: entry.offset,
    });
  }
  return name;
}
