/**
 * Property tests of the GGUF reader with fast-check: structured random files (random metadata of
 * every value type, nested arrays, random tensors of several ggml types, versions 2 and 3, random
 * alignments) read back exactly what was written; the same files with one header field set to a
 * hostile value (a huge count or length, a bad type id, a bad dimension) or truncated anywhere are
 * either read or refused with a typed GgufError, never anything else.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { checkReaderInput } from "./fuzz-check.js";
import {
  GGML_TYPE_TRAITS,
  GgmlType,
  GgufValueType,
  readGguf,
  readTensorBytes,
  writeGguf,
  type GgufMetadataEntry,
  type GgufWriteTensor,
} from "./index.js";

/** fast-check's seed is fixed so a failure reproduces; the run count keeps the file under a few seconds. */
const RUNS = { numRuns: 200, seed: 20_261_201 };

const key = fc.stringMatching(/^[a-z][a-z0-9_.]{0,30}$/);
const text = fc.string({ unit: "grapheme", maxLength: 40 });

/** A scalar metadata value of a random type, as the reader returns it. */
const scalar: fc.Arbitrary<{ type: GgufValueType; value: number | bigint | boolean | string }> = fc.oneof(
  fc.record({ type: fc.constant(GgufValueType.UINT8), value: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ type: fc.constant(GgufValueType.INT8), value: fc.integer({ min: -128, max: 127 }) }),
  fc.record({ type: fc.constant(GgufValueType.UINT16), value: fc.integer({ min: 0, max: 65_535 }) }),
  fc.record({ type: fc.constant(GgufValueType.INT16), value: fc.integer({ min: -32_768, max: 32_767 }) }),
  fc.record({ type: fc.constant(GgufValueType.UINT32), value: fc.integer({ min: 0, max: 2 ** 32 - 1 }) }),
  fc.record({ type: fc.constant(GgufValueType.INT32), value: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }) }),
  fc.record({ type: fc.constant(GgufValueType.FLOAT32), value: fc.float({ noNaN: true }) }),
  fc.record({ type: fc.constant(GgufValueType.FLOAT64), value: fc.double({ noNaN: true }) }),
  fc.record({ type: fc.constant(GgufValueType.BOOL), value: fc.boolean() }),
  fc.record({ type: fc.constant(GgufValueType.STRING), value: text }),
  fc.record({ type: fc.constant(GgufValueType.UINT64), value: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }) }),
  fc.record({ type: fc.constant(GgufValueType.INT64), value: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }) }),
);

/** An array entry: items of one scalar type (or strings), possibly empty. */
const array = fc.oneof(
  fc
    .array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { maxLength: 20 })
    .map((items) => ({ itemType: GgufValueType.UINT32, items: items as unknown[] })),
  fc.array(fc.float({ noNaN: true }), { maxLength: 20 }).map((items) => ({ itemType: GgufValueType.FLOAT32, items: items as unknown[] })),
  fc
    .array(fc.integer({ min: -128, max: 127 }), { maxLength: 20 })
    .map((items) => ({ itemType: GgufValueType.INT8, items: items as unknown[] })),
  fc.array(fc.boolean(), { maxLength: 20 }).map((items) => ({ itemType: GgufValueType.BOOL, items: items as unknown[] })),
  fc.array(text, { maxLength: 10 }).map((items) => ({ itemType: GgufValueType.STRING, items: items as unknown[] })),
  fc
    .array(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), { maxLength: 8 })
    .map((items) => ({ itemType: GgufValueType.INT64, items: items as unknown[] })),
);

const metadata: fc.Arbitrary<GgufMetadataEntry[]> = fc
  .uniqueArray(
    fc.tuple(
      key,
      fc.oneof(
        scalar,
        array.map((a) => ({ type: GgufValueType.ARRAY, itemType: a.itemType, value: a.items })),
      ),
    ),
    { maxLength: 12, selector: ([k]) => k },
  )
  .map((entries) => entries.map(([k, v]) => ({ key: k, ...v }) as GgufMetadataEntry));

/** Tensor types with their block size; shapes are whole blocks along ne0. */
const TENSOR_TYPES = [GgmlType.F32, GgmlType.F16, GgmlType.BF16, GgmlType.Q8_0, GgmlType.Q4_0, GgmlType.Q4_K, GgmlType.Q6_K];

const tensors: fc.Arbitrary<GgufWriteTensor[]> = fc
  .uniqueArray(
    fc.record({
      name: fc.stringMatching(/^[a-z][a-z0-9_.]{0,20}$/),
      type: fc.constantFrom(...TENSOR_TYPES),
      blocks: fc.integer({ min: 1, max: 3 }),
      rest: fc.array(fc.integer({ min: 1, max: 3 }), { maxLength: 3 }),
      seed: fc.integer({ min: 0, max: 255 }),
    }),
    { maxLength: 5, selector: (t) => t.name },
  )
  .map((list) =>
    list.map(({ name, type, blocks, rest, seed }) => {
      const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
      const ne = [blocks * blockSize, ...rest];
      const rows = rest.reduce((a, b) => a * b, 1);
      const data = Uint8Array.from({ length: blocks * typeSize * rows }, (_, i) => (i * 31 + seed) & 0xff);
      return { name, type, ne, data };
    }),
  );

const file = fc.record({
  metadata,
  tensors,
  version: fc.constantFrom(2 as const, 3 as const),
  alignment: fc.constantFrom(8, 16, 32, 64, 256),
});

/** Items as plain values for comparison (typed arrays and JS arrays alike). */
function plain(value: unknown): unknown {
  if (ArrayBuffer.isView(value)) return Array.from(value as unknown as ArrayLike<unknown>);
  if (Array.isArray(value)) return value.map(plain);
  return value;
}

function encode(input: { metadata: GgufMetadataEntry[]; tensors: GgufWriteTensor[]; version: 2 | 3; alignment: number }) {
  // general.alignment is written by the writer from `alignment`; a random key of that name would clash
  const entries = input.metadata.filter((e) => e.key !== "general.alignment");
  return { entries, bytes: writeGguf({ metadata: entries, tensors: input.tensors, version: input.version, alignment: input.alignment }) };
}

describe("GGUF reader properties (fast-check)", () => {
  it("reads back every structured random file exactly as written", async () => {
    await fc.assert(
      fc.asyncProperty(file, async (input) => {
        const { entries, bytes } = encode(input);
        const parsed = await readGguf(bytes);
        expect(parsed.version).toBe(input.version);
        expect(parsed.alignment).toBe(input.alignment);
        for (const entry of entries) {
          const got = parsed.metadata.get(entry.key);
          expect(got?.type, entry.key).toBe(entry.type);
          if (entry.type === GgufValueType.ARRAY) expect(got?.itemType, entry.key).toBe(entry.itemType);
          const want = entry.type === GgufValueType.FLOAT32 ? Math.fround(entry.value as number) : entry.value;
          const wantPlain = entry.itemType === GgufValueType.FLOAT32 ? (plain(entry.value) as number[]).map(Math.fround) : plain(want);
          expect(plain(got?.value), entry.key).toEqual(wantPlain);
        }
        expect(parsed.tensors.map((t) => [t.name, t.type, t.ne])).toEqual(input.tensors.map((t) => [t.name, t.type, t.ne]));
        for (const [i, tensor] of parsed.tensors.entries()) {
          expect(tensor.offset % input.alignment).toBe(0);
          expect(Buffer.from(await readTensorBytes(bytes, tensor)).equals(Buffer.from(input.tensors[i]!.data))).toBe(true);
        }
      }),
      RUNS,
    );
  });

  it("a hostile value in any header field, or a cut anywhere, is read or refused with a typed error", async () => {
    const hostile = fc.constantFrom(0n, 1n, 0xffn, 0xffffn, 0xffff_ffffn, 0x1_0000_0000n, 0x7fff_ffff_ffff_ffffn, 0xffff_ffff_ffff_ffffn);
    await fc.assert(
      fc.asyncProperty(file, fc.nat(), hostile, fc.constantFrom(1, 2, 4, 8), fc.boolean(), async (input, where, value, width, cut) => {
        const { bytes } = encode(input);
        const headerEnd = Math.min(bytes.length, bytes.length - input.tensors.reduce((a, t) => a + t.data.length, 0));
        const at = where % Math.max(1, headerEnd);
        const mutated = cut ? bytes.slice(0, at) : bytes.slice();
        if (!cut) {
          const view = new DataView(mutated.buffer);
          const room = mutated.length - at;
          if (width === 8 && room >= 8) view.setBigUint64(at, value, true);
          else if (width >= 4 && room >= 4) view.setUint32(at, Number(value & 0xffff_ffffn), true);
          else if (width >= 2 && room >= 2) view.setUint16(at, Number(value & 0xffffn), true);
          else if (room >= 1) view.setUint8(at, Number(value & 0xffn));
        }
        // checkReaderInput throws ReaderFinding for anything but a parse or a typed error
        expect(typeof (await checkReaderInput(mutated))).toBe("string");
      }),
      { ...RUNS, numRuns: 500 },
    );
  });
});
