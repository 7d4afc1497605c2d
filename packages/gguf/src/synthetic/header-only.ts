import { open } from "node:fs/promises";

/**
 * Writes a header-only GGUF: `header`, then a sparse file up to `fileSize` (the tensor bytes read as zeros and take
 * no disk space). Returns the file size.
 */
export async function writeHeaderOnlyFile(path: string, { header, fileSize }: { header: Uint8Array; fileSize: number }): Promise<number> {
  const handle = await open(path, "w");
  try {
    await handle.write(header, 0, header.length, 0);
    await handle.truncate(fileSize);
  } finally {
    await handle.close();
  }
  return fileSize;
}
