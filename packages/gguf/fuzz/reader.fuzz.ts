/**
 * Coverage-guided fuzz target of the GGUF reader for Jazzer.js (libFuzzer): bundled to CommonJS by
 * fuzz/run.mjs so Jazzer instruments the reader's code. A ReaderFinding (untyped error, tensor
 * outside the file, ...) is a crash; a typed GgufError is an expected outcome.
 */
import { checkReaderInput } from "../src/fuzz-check.js";

export async function fuzz(data: Buffer): Promise<void> {
  await checkReaderInput(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
}
