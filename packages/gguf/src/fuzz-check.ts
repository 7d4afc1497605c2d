/**
 * The property every reader input must have, shared by the property tests and the coverage-guided
 * fuzz target (fuzz/reader.fuzz.ts): parsing arbitrary bytes either succeeds with a file whose
 * tensors lie inside it, or throws a GgufError (typed, with a code). Anything else (another error
 * type, a tensor outside the bytes, a plan that throws untyped) is a finding.
 */
import { GgufError } from "./errors.js";
import { getArchitecture } from "./metadata.js";
import { buildLoadPlan } from "./qwen35/load-plan.js";
import { readGguf, readTensorBytes } from "./reader.js";
import type { GgufFile } from "./types.js";

/** An input the reader handled wrongly. */
export class ReaderFinding extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ReaderFinding";
  }
}

function mustBeTyped(error: unknown, where: string): void {
  if (!GgufError.isInstance(error)) {
    throw new ReaderFinding(`${where} threw an untyped ${error instanceof Error ? error.name : typeof error}: ${String(error)}`, {
      cause: error,
    });
  }
}

/** Returns "parsed" or the typed error code; throws ReaderFinding otherwise. */
export async function checkReaderInput(bytes: Uint8Array): Promise<string> {
  let file: GgufFile;
  try {
    file = await readGguf(bytes);
  } catch (error) {
    mustBeTyped(error, "readGguf");
    return (error as GgufError).code;
  }
  for (const tensor of file.tensors) {
    if (tensor.offset < file.dataOffset || tensor.offset + tensor.byteLength > file.fileSize) {
      throw new ReaderFinding(`tensor ${tensor.name} [${tensor.offset}, +${tensor.byteLength}) lies outside the ${file.fileSize} bytes`);
    }
    const data = await readTensorBytes(bytes, tensor).catch((error: unknown) => {
      mustBeTyped(error, `readTensorBytes(${tensor.name})`);
      return undefined;
    });
    if (data && data.length !== tensor.byteLength)
      throw new ReaderFinding(`tensor ${tensor.name}: ${data.length} bytes read, ${tensor.byteLength} expected`);
  }
  if (getArchitecture(file) === "qwen35") {
    try {
      buildLoadPlan(file);
    } catch (error) {
      mustBeTyped(error, "buildLoadPlan");
    }
  }
  return "parsed";
}
