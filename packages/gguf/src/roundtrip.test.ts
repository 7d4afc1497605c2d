import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  GGML_TYPE_TRAITS,
  GgmlType,
  GgufValueType,
  getMetadata,
  gguf,
  readGguf,
  readTensorBytes,
  writeGguf,
  type GgufMetadataEntry,
  type GgufWriteTensor,
} from "./index.js";

const dir = mkdtempSync(join(tmpdir(), "kq-gguf-rt-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s >>> 24;
  }
  return out;
}

/** One key of every scalar type, arrays of every item type, and nested arrays. */
const metadata: GgufMetadataEntry[] = [
  gguf.str("general.architecture", "test"),
  gguf.u8("t.u8", 250),
  gguf.i8("t.i8", -7),
  gguf.u16("t.u16", 65_000),
  gguf.i16("t.i16", -32_000),
  gguf.u32("t.u32", 4_000_000_000),
  gguf.i32("t.i32", -2_000_000_000),
  gguf.f32("t.f32", 1e-6),
  gguf.bool("t.bool", true),
  gguf.str("t.str", "héllo, wörld ✓ 𝄞"),
  gguf.u64("t.u64", 18_000_000_000_000_000_000n),
  gguf.i64("t.i64", -9_000_000_000_000_000_000n),
  gguf.f64("t.f64", Math.PI),
  gguf.arr("a.u8", GgufValueType.UINT8, [0, 1, 255]),
  gguf.arr("a.i8", GgufValueType.INT8, [-128, 0, 127]),
  gguf.arr("a.u16", GgufValueType.UINT16, [0, 65535]),
  gguf.arr("a.i16", GgufValueType.INT16, [-32768, 32767]),
  gguf.arr("a.u32", GgufValueType.UINT32, [0, 4294967295]),
  gguf.arr("a.i32", GgufValueType.INT32, [11, 11, 10, 0]),
  gguf.arr("a.f32", GgufValueType.FLOAT32, [0.5, -2.25, 1e30]),
  gguf.arr("a.bool", GgufValueType.BOOL, [true, false, true]),
  gguf.arr("a.str", GgufValueType.STRING, ["a", "", "Ġthe", "<|im_end|>", "字"]),
  gguf.arr("a.u64", GgufValueType.UINT64, new BigUint64Array([0n, 1n << 63n])),
  gguf.arr("a.i64", GgufValueType.INT64, new BigInt64Array([-1n, 1n << 62n])),
  gguf.arr("a.f64", GgufValueType.FLOAT64, [Math.E, -0]),
  gguf.arr("a.empty", GgufValueType.STRING, []),
  gguf.arr("a.nested", GgufValueType.ARRAY, [
    { itemType: GgufValueType.INT32, value: [1, 2, 3] },
    { itemType: GgufValueType.STRING, value: ["x", "yz"] },
    { itemType: GgufValueType.ARRAY, value: [{ itemType: GgufValueType.BOOL, value: [false] }] },
  ] as never),
];

function tensors(): GgufWriteTensor[] {
  const list: { name: string; type: GgmlType; ne: number[] }[] = [
    { name: "f32.vec", type: GgmlType.F32, ne: [7] },
    { name: "f16.mat", type: GgmlType.F16, ne: [64, 3] },
    { name: "q4k.mat", type: GgmlType.Q4_K, ne: [512, 2] },
    { name: "q8_0.3d", type: GgmlType.Q8_0, ne: [32, 2, 3] },
    { name: "bf16.4d", type: GgmlType.BF16, ne: [2, 3, 4, 5] },
    { name: "empty", type: GgmlType.F32, ne: [0, 4] },
  ];
  return list.map((t, i) => {
    const { blockSize, typeSize } = GGML_TYPE_TRAITS[t.type];
    const n = (t.ne.reduce((a, b) => a * b, 1) / blockSize) * typeSize;
    return { ...t, data: bytes(n, i + 1) };
  });
}

function plain(value: unknown): unknown {
  if (ArrayBuffer.isView(value)) return Array.from(value as unknown as ArrayLike<unknown>);
  if (Array.isArray(value))
    return value.map((v) => (typeof v === "object" && v !== null && "itemType" in v ? { itemType: v.itemType, value: plain(v.value) } : v));
  return value;
}

describe("write -> read round trip", () => {
  for (const version of [2, 3] as const) {
    for (const alignment of [1, 8, 32, 64, 4096]) {
      it(`v${version}, alignment ${alignment}: every key, type and tensor byte survives (buffer and file)`, async () => {
        const input = { metadata, tensors: tensors(), alignment, version };
        const file = writeGguf(input);
        const path = join(dir, `rt-${version}-${alignment}.gguf`);
        writeFileSync(path, file);
        for (const source of [file, path]) {
          const parsed = await readGguf(source);
          expect(parsed.version).toBe(version);
          expect(parsed.alignment).toBe(alignment);
          expect(parsed.dataOffset % alignment).toBe(0);
          expect(parsed.fileSize).toBe(file.length);
          const expectedKeys = metadata.map((e) => e.key);
          if (alignment !== 32) expectedKeys.push("general.alignment");
          expect([...parsed.metadata.keys()]).toEqual(expectedKeys);
          for (const entry of metadata) {
            const got = parsed.metadata.get(entry.key)!;
            expect(got.type, entry.key).toBe(entry.type);
            expect(got.itemType, entry.key).toBe(entry.itemType);
            const want = entry.type === GgufValueType.FLOAT32 ? Math.fround(entry.value as number) : entry.value;
            const wantPlain = entry.key === "a.f32" ? (entry.value as number[]).map(Math.fround) : plain(want);
            expect(plain(got.value), entry.key).toEqual(wantPlain);
          }
          expect(parsed.tensors.map((t) => t.name)).toEqual(input.tensors.map((t) => t.name));
          for (const [i, t] of parsed.tensors.entries()) {
            const want = input.tensors[i]!;
            expect(t.type).toBe(want.type);
            expect(t.ne).toEqual(want.ne);
            expect(t.shape).toEqual([...want.ne].reverse());
            expect(t.offset % alignment).toBe(0);
            expect(t.offset).toBe(parsed.dataOffset + t.relativeOffset);
            expect(t.byteLength).toBe(want.data.length);
            expect(Buffer.from(await readTensorBytes(source, t)).equals(Buffer.from(want.data))).toBe(true);
          }
        }
      });
    }
  }

  it("getMetadata returns plain values and undefined for absent keys", async () => {
    const parsed = await readGguf(writeGguf({ metadata, tensors: [] }));
    expect(getMetadata(parsed, "t.u32")).toBe(4_000_000_000);
    expect(getMetadata(parsed, "t.u64")).toBe(18_000_000_000_000_000_000n);
    expect(getMetadata(parsed, "t.bool")).toBe(true);
    expect(getMetadata(parsed, "a.i32")).toBeInstanceOf(Int32Array);
    expect(Array.from(getMetadata(parsed, "a.i32") as Int32Array)).toEqual([11, 11, 10, 0]);
    expect(getMetadata(parsed, "a.str")).toEqual(["a", "", "Ġthe", "<|im_end|>", "字"]);
    expect(getMetadata(parsed, "missing.key")).toBeUndefined();
  });

  it("a header in a file bigger than the first read chunk parses with several positioned reads", async () => {
    const tokens = Array.from({ length: 60_000 }, (_, i) => `tok_${i}_${"x".repeat(i % 13)}`);
    const file = writeGguf({
      metadata: [gguf.arr("tokenizer.ggml.tokens", GgufValueType.STRING, tokens)],
      tensors: [{ name: "w", type: GgmlType.F32, ne: [4], data: bytes(16, 9) }],
    });
    expect(file.length).toBeGreaterThan(1_000_000);
    const path = join(dir, "big-header.gguf");
    writeFileSync(path, file);
    const parsed = await readGguf(path);
    expect(getMetadata(parsed, "tokenizer.ggml.tokens")).toEqual(tokens);
    expect(Array.from(await readTensorBytes(path, parsed.tensors[0]!))).toEqual(Array.from(bytes(16, 9)));
  });
});
