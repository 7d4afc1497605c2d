/**
 * The chunked file path (FileSource, as the CLI reads models) under fuzzing, in CI's smoke budget:
 * a fixed number of deterministic cases (seeded mutations of small valid files), each written to a
 * file, read by path, read while the file changes size, and through a source with short reads.
 * Only a parse or a typed GgufError may come out. The coverage-guided run of the same property is
 * `pnpm fuzz -- --target file-source` (fuzz/file-source.fuzz.ts).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FaultySource, checkFileInput, faultFor } from "./fuzz-check.js";
import {
  GgmlType,
  GgufValueType,
  gguf,
  mulberry32,
  qwen35SpecLayout,
  QWEN35_TEST_SHAPE,
  readGguf,
  readTensorBytes,
  writeGguf,
} from "./index.js";

const dir = mkdtempSync(path.join(tmpdir(), "kq-gguf-fuzz-file-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = path.join(dir, "input.gguf");

const small = writeGguf({
  metadata: [
    gguf.str("general.architecture", "llama"),
    gguf.u32("t.u32", 7),
    gguf.f32("t.f32", 0.5),
    gguf.arr("t.strings", GgufValueType.STRING, ["a", "bc"]),
  ],
  tensors: [
    { name: "a", type: GgmlType.F32, ne: [4, 2], data: new Uint8Array(32).fill(3) },
    { name: "b", type: GgmlType.Q8_0, ne: [32], data: new Uint8Array(34).fill(5) },
  ],
});
const layout = qwen35SpecLayout(QWEN35_TEST_SHAPE);
const SEEDS = [small, writeGguf({ metadata: layout.metadata, tensors: [] })];

/** Seeded mutations: bit flips, truncation, a run of random bytes, a duplicated slice. */
function mutate(seed: Uint8Array, random: () => number): Uint8Array {
  const bytes = Uint8Array.from(seed);
  const kind = Math.floor(random() * 4);
  if (kind === 0) {
    for (let i = 0, n = 1 + Math.floor(random() * 4); i < n; i++)
      bytes[Math.floor(random() * bytes.length)]! ^= 1 << Math.floor(random() * 8);
    return bytes;
  }
  if (kind === 1) return bytes.subarray(0, Math.floor(random() * bytes.length));
  if (kind === 2) {
    const at = Math.floor(random() * bytes.length);
    for (let i = at; i < Math.min(bytes.length, at + 8); i++) bytes[i] = Math.floor(random() * 256);
    return bytes;
  }
  const at = Math.floor(random() * bytes.length);
  const len = Math.floor(random() * 64);
  return Uint8Array.from([...bytes.subarray(0, at), ...bytes.subarray(at, at + len), ...bytes.subarray(at)]);
}

const CASES = 400;

describe("fuzzing the chunked file path (FileSource, files that change size, short reads)", () => {
  it(`smoke: ${CASES} seeded cases, only parses and typed errors`, async () => {
    const random = mulberry32(0x6767);
    const outcomes = new Map<string, number>();
    for (let i = 0; i < CASES; i++) {
      const input = i < SEEDS.length ? SEEDS[i]! : mutate(SEEDS[i % SEEDS.length]!, random);
      for (const code of await checkFileInput(input, file)) outcomes.set(code, (outcomes.get(code) ?? 0) + 1);
    }
    // the cases reach both outcomes: some inputs parse, some are refused (short reads among them)
    expect(outcomes.get("parsed")).toBeGreaterThan(0);
    expect(outcomes.get("GGUF_IO")).toBeGreaterThan(0);
    for (const code of outcomes.keys()) expect(code).toMatch(/^(parsed|GGUF_[A-Z_]+|QWEN35_[A-Z_]+)$/);
  });

  it("a short read is a typed GGUF_IO naming the offset, never a read past the buffer", async () => {
    for (let after = 0; after < 4; after++) {
      // small first reads: the header takes several reads, the `after`-th one comes back short
      const error = await readGguf(new FaultySource(small, { kind: "short", after, by: 3 }), { firstReadBytes: 8 }).catch(
        (e: unknown) => e,
      );
      expect(error, `after ${after}`).toMatchObject({ code: "GGUF_IO", name: "GgufIoError" });
      expect((error as Error).message).toMatch(/^short read from faulty source: \d+ bytes asked at offset \d+, \d+ returned/);
    }
    const header = await readGguf(small);
    const tensor = header.tensors[1]!;
    await expect(readTensorBytes(new FaultySource(small, { kind: "short", after: 0, by: 1 }), tensor)).rejects.toMatchObject({
      code: "GGUF_IO",
      field: "b",
      offset: tensor.offset,
    });
  });

  it("a file truncated after FileSource.open's stat is a typed error; one that grows still parses as it was", async () => {
    expect(faultFor(small)).toEqual(faultFor(Uint8Array.from(small))); // a case replays
    await expect(checkFileInput(small, file)).resolves.toContain("parsed");
  });
});
