/**
 * Coverage-guided fuzz target of the chunked file path (FileSource) for Jazzer.js: each input is
 * written to a temporary file and read by path, then read again while the file changes size and
 * through a source with short reads (checkFileInput). A ReaderFinding is a crash; a typed GgufError
 * is an expected outcome. `pnpm fuzz -- --target file-source`.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { checkFileInput } from "../src/fuzz-check.js";

const dir = mkdtempSync(path.join(tmpdir(), "kq-fuzz-file-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const file = path.join(dir, "input.gguf");

export async function fuzz(data: Buffer): Promise<void> {
  await checkFileInput(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), file);
}
