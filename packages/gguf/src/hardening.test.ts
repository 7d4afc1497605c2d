import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  FileSource,
  GgmlType,
  GgufError,
  GgufLimitError,
  GgufValueType,
  assertRegularFile,
  gguf,
  readGguf,
  writeGguf,
  type GgufLimits,
} from "./index.js";

const dir = mkdtempSync(join(tmpdir(), "kq-gguf-hard-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Raw little-endian GGUF builder: writes whatever it is told, valid or not. */
class Raw {
  private parts: Buffer[] = [];
  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v >>> 0);
    this.parts.push(b);
    return this;
  }
  u64(v: bigint | number): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.parts.push(b);
    return this;
  }
  u8(v: number): this {
    this.parts.push(Buffer.from([v]));
    return this;
  }
  str(s: string): this {
    const b = Buffer.from(s, "utf8");
    return this.u64(b.length).bytes(b);
  }
  bytes(b: Uint8Array): this {
    this.parts.push(Buffer.from(b));
    return this;
  }
  header(tensors: number, kvs: number, version = 3): this {
    return this.bytes(Buffer.from("GGUF")).u32(version).u64(tensors).u64(kvs);
  }
  kvU32(key: string, v: number): this {
    return this.str(key).u32(GgufValueType.UINT32).u32(v);
  }
  tensor(name: string, ne: number[], type: number, offset: number | bigint): this {
    this.str(name).u32(ne.length);
    for (const d of ne) this.u64(d);
    return this.u32(type).u64(offset);
  }
  pad(to: number): this {
    const len = this.length;
    return this.bytes(new Uint8Array(Math.ceil(len / to) * to - len));
  }
  zeros(n: number): this {
    return this.bytes(new Uint8Array(n));
  }
  get length(): number {
    return this.parts.reduce((a, b) => a + b.length, 0);
  }
  build(): Uint8Array {
    return new Uint8Array(Buffer.concat(this.parts));
  }
}

async function failure(bytes: Uint8Array, limits?: Partial<GgufLimits>): Promise<GgufError> {
  for (const source of [bytes, writeTemp(bytes)]) {
    try {
      await readGguf(source, limits ? { limits } : {});
    } catch (error) {
      if (!GgufError.isInstance(error)) throw error;
      if (source === bytes) continue;
      return error;
    }
    throw new Error("parse unexpectedly succeeded");
  }
  throw new Error("unreachable");
}

let counter = 0;
function writeTemp(bytes: Uint8Array): string {
  const path = join(dir, `case-${counter++}.gguf`);
  writeFileSync(path, bytes);
  return path;
}

describe("refusals: typed errors that name the field and the file offset", () => {
  it("bad magic, v1, big-endian, unknown version", async () => {
    const magic = await failure(new Raw().bytes(Buffer.from("GGML")).u32(3).u64(0).u64(0).build());
    expect([magic.code, magic.offset, magic.field]).toEqual(["GGUF_BAD_MAGIC", 0, "magic"]);
    const v1 = await failure(new Raw().header(0, 0, 1).build());
    expect([v1.code, v1.offset]).toEqual(["GGUF_UNSUPPORTED_VERSION", 4]);
    expect(v1.message).toContain("v1");
    const be = await failure(new Raw().header(0, 0, 0x03000000).build());
    expect(be.message).toContain("big-endian");
    expect((await failure(new Raw().header(0, 0, 4).build())).message).toContain("version 4");
  });

  it("empty and truncated files", async () => {
    expect((await failure(new Uint8Array(0))).code).toBe("GGUF_TRUNCATED");
    const t = await failure(new Raw().header(0, 1).str("general.name").build());
    expect(t.code).toBe("GGUF_TRUNCATED");
  });

  it("unknown value type id, bool not 0/1", async () => {
    const e = await failure(new Raw().header(0, 1).str("k").u32(13).u32(0).build());
    expect([e.code, e.offset, e.field]).toEqual(["GGUF_BAD_VALUE_TYPE", 24 + 9, "k"]);
    const b = await failure(new Raw().header(0, 1).str("flag").u32(GgufValueType.BOOL).u8(2).build());
    expect(b.code).toBe("GGUF_BAD_VALUE");
    expect(b.field).toBe("flag");
  });

  it("duplicate keys and tensor names", async () => {
    const k = await failure(new Raw().header(0, 2).kvU32("a", 1).kvU32("a", 2).build());
    expect([k.code, k.field, k.offset]).toEqual(["GGUF_DUPLICATE_KEY", "a", 24 + 8 + 1 + 8]);
    const raw = new Raw().header(2, 0).tensor("w", [4], GgmlType.F32, 0).tensor("w", [4], GgmlType.F32, 32).pad(32).zeros(64).build();
    const t = await failure(raw);
    expect([t.code, t.field]).toEqual(["GGUF_DUPLICATE_TENSOR", "w"]);
  });

  it("bad general.alignment (type or not a power of two)", async () => {
    expect((await failure(new Raw().header(0, 1).kvU32("general.alignment", 48).build())).code).toBe("GGUF_BAD_ALIGNMENT");
    const wrongType = new Raw().header(0, 1).str("general.alignment").u32(GgufValueType.UINT64).u64(32).build();
    expect((await failure(wrongType)).field).toBe("general.alignment");
  });

  it("unknown or retired tensor type ids", async () => {
    for (const id of [4, 31, 36, 43, 1000]) {
      const e = await failure(new Raw().header(1, 0).tensor("w", [32], id, 0).pad(32).zeros(64).build());
      expect(e.code).toBe("GGUF_BAD_TENSOR_TYPE");
      expect(e.message).toContain(`type id ${id}`);
      expect(e.field).toBe("w");
    }
  });

  it("a row that is not a whole number of blocks", async () => {
    const e = await failure(new Raw().header(1, 0).tensor("q", [100, 2], GgmlType.Q4_K, 0).pad(32).zeros(4096).build());
    expect(e.code).toBe("GGUF_PARTIAL_BLOCK");
    expect(e.message).toContain("Q4_K");
  });

  it("misaligned, out-of-bounds and overlapping tensors", async () => {
    const mis = await failure(new Raw().header(1, 0).tensor("w", [4], GgmlType.F32, 8).pad(32).zeros(64).build());
    expect([mis.code, mis.field]).toEqual(["GGUF_MISALIGNED_TENSOR", "w"]);
    const oob = await failure(new Raw().header(1, 0).tensor("w", [64], GgmlType.F32, 0).pad(32).zeros(100).build());
    expect(oob.code).toBe("GGUF_TENSOR_OUT_OF_BOUNDS");
    expect(oob.offset).toBe(24);
    const over = await failure(
      new Raw().header(2, 0).tensor("a", [16], GgmlType.F32, 0).tensor("b", [16], GgmlType.F32, 32).pad(32).zeros(128).build(),
    );
    expect([over.code, over.field]).toEqual(["GGUF_OVERLAPPING_TENSORS", "b"]);
    const huge = await failure(
      new Raw()
        .header(1, 0)
        .tensor("w", [4], GgmlType.F32, 1n << 62n)
        .pad(32)
        .zeros(64)
        .build(),
    );
    expect([huge.code, huge.offset]).toEqual(["GGUF_TENSOR_OUT_OF_BOUNDS", 24 + 9 + 4 + 8 + 4]);
  });

  it("named limits: string, key, tensor name, array length, nesting, key count, tensor count, dims, element overflow, header size", async () => {
    const limit = async (bytes: Uint8Array, name: string, limits?: Partial<GgufLimits>) => {
      const e = await failure(bytes, limits);
      expect(e).toBeInstanceOf(GgufLimitError);
      expect(e.code).toBe("GGUF_LIMIT_EXCEEDED");
      expect((e as GgufLimitError).limit).toBe(name);
      expect(e.message).toMatch(/exceeds the maximum allowed \(\d+\)/);
      return e;
    };
    await limit(new Raw().header(0, 1).str("s").u32(GgufValueType.STRING).str("x".repeat(100)).build(), "string length", {
      maxStringBytes: 99,
    });
    await limit(new Raw().header(0, 1).str("k".repeat(70_000)).u32(GgufValueType.UINT8).u8(0).build(), "key length");
    await limit(
      new Raw()
        .header(0, 1)
        .str("a")
        .u32(GgufValueType.ARRAY)
        .u32(GgufValueType.UINT8)
        .u64(1n << 40n)
        .build(),
      "array length",
    );
    let nested = new Raw().header(0, 1).str("n").u32(GgufValueType.ARRAY);
    for (let i = 0; i < 12; i++) nested = nested.u32(GgufValueType.ARRAY).u64(1);
    await limit(nested.u32(GgufValueType.UINT8).u64(0).build(), "array nesting");
    await limit(new Raw().header(1, 0).tensor("t".repeat(64), [4], GgmlType.F32, 0).pad(32).zeros(16).build(), "tensor name length");
    await limit(new Raw().header(0, 100_000).build(), "metadata key count");
    await limit(new Raw().header(2_000_000, 0).build(), "tensor count");
    await limit(new Raw().header(1, 0).tensor("w", [1, 1, 1, 1, 1], GgmlType.F32, 0).build(), "tensor dimension count");
    const over = await limit(
      new Raw()
        .header(1, 0)
        .tensor("w", [1 << 30, 1 << 30, 1 << 30], GgmlType.F32, 0)
        .build(),
      "tensor element count",
    );
    expect(over.field).toBe("w.ne[1]"); // 2^30 * 2^30 > 2^53 - 1
    await limit(new Raw().header(0, 1).str("s").u32(GgufValueType.STRING).str("x".repeat(5000)).build(), "header size", {
      maxHeaderBytes: 4096,
    });
  });

  it("counts that the file cannot hold are refused before allocating", async () => {
    const e = await failure(new Raw().header(0, 1).str("a").u32(GgufValueType.ARRAY).u32(GgufValueType.STRING).u64(10_000_000).build());
    expect(e.code).toBe("GGUF_TRUNCATED");
    expect(e.field).toContain("a[");
  });

  it("a missing file is a typed GGUF_IO error", async () => {
    await expect(readGguf(join(dir, "does-not-exist.gguf"))).rejects.toMatchObject({ code: "GGUF_IO" });
  });
});

describe("a path that is not a regular file: GGUF_NOT_A_FILE from a stat, before any open that can block", () => {
  // A regression (open before stat) blocks on the FIFO forever: vitest's test timeout fails it.
  const cases: [string, () => Promise<string>, RegExp][] = [
    [
      "a directory",
      async () => {
        const p = join(dir, "a-directory.gguf");
        mkdirSync(p, { recursive: true });
        return p;
      },
      /is a directory, not a regular file$/,
    ],
    [
      "a FIFO",
      async () => {
        const p = join(dir, "a-fifo.gguf");
        rmSync(p, { force: true });
        const made = spawnSync("mkfifo", [p]);
        if (made.status !== 0) throw new Error(`mkfifo failed: ${made.stderr}`);
        return p;
      },
      /is a FIFO \(named pipe\), not a regular file$/,
    ],
    ["a character device", async () => "/dev/null", /is a character device, not a regular file$/],
    [
      "a socket",
      async () => {
        const p = join(dir, "a-socket.gguf");
        rmSync(p, { force: true });
        const server = net.createServer();
        await new Promise<void>((resolve) => server.listen(p, resolve));
        sockets.push(server);
        return p;
      },
      /is a socket, not a regular file$/,
    ],
  ];
  const sockets: net.Server[] = [];
  afterAll(async () => {
    await Promise.all(sockets.map((s) => new Promise((resolve) => s.close(resolve))));
  });

  for (const [label, make, message] of cases) {
    it(`${label}: readGguf(path), FileSource.open and assertRegularFile all refuse it, naming the path`, async () => {
      const p = await make();
      for (const attempt of [() => readGguf(p), () => FileSource.open(p), () => assertRegularFile(p)]) {
        const error = await attempt().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(GgufError.isInstance(error)).toBe(true);
        expect(error).toMatchObject({ code: "GGUF_NOT_A_FILE", field: p, name: "GgufNotAFileError" });
        expect((error as Error).message).toContain(p);
        expect((error as Error).message).toMatch(message);
      }
    });
  }
});

/** xorshift32 */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
}

describe("fuzz: every mangled file is a typed error or a valid parse", () => {
  const valid = writeGguf({
    metadata: [
      gguf.str("general.architecture", "fuzz"),
      gguf.u32("a.u32", 7),
      gguf.f32("a.f32", 0.5),
      gguf.bool("a.bool", true),
      gguf.u64("a.u64", 5n),
      gguf.arr("a.tokens", GgufValueType.STRING, ["<s>", "hello", "Ġworld"]),
      gguf.arr("a.i32", GgufValueType.INT32, [1, 2, 3]),
      gguf.arr("a.nested", GgufValueType.ARRAY, [{ itemType: GgufValueType.UINT8, value: [1, 2] }] as never),
    ],
    tensors: [
      { name: "w.f32", type: GgmlType.F32, ne: [8, 2], data: new Uint8Array(64).fill(1) },
      { name: "w.q8", type: GgmlType.Q8_0, ne: [32], data: new Uint8Array(34).fill(2) },
      { name: "w.f16", type: GgmlType.F16, ne: [4], data: new Uint8Array(8).fill(3) },
    ],
    alignment: 16,
  });

  async function outcome(bytes: Uint8Array): Promise<"ok" | string> {
    try {
      const file = await readGguf(bytes);
      for (const t of file.tensors) {
        expect(t.offset + t.byteLength).toBeLessThanOrEqual(bytes.length);
        expect(t.offset % file.alignment).toBe(0);
      }
      return "ok";
    } catch (error) {
      if (GgufError.isInstance(error)) return error.code;
      throw new Error(`untyped ${String(error)} for input of ${bytes.length} bytes`, { cause: error });
    }
  }

  it(`truncation at every byte (${valid.length} cases)`, async () => {
    expect(await outcome(valid)).toBe("ok");
    const parsed = await readGguf(valid);
    const lastEnd = Math.max(...parsed.tensors.map((t) => t.offset + t.byteLength));
    const codes = new Map<string, number>();
    for (let n = 0; n < valid.length; n++) {
      const code = await outcome(valid.subarray(0, n));
      // Only the padding after the last tensor may be cut; any shorter prefix loses needed bytes.
      if (n >= lastEnd) expect(code).toBe("ok");
      else expect(code).not.toBe("ok");
      codes.set(code, (codes.get(code) ?? 0) + 1);
    }
    expect(codes.get("GGUF_TRUNCATED")).toBeGreaterThan(0);
    expect(codes.get("GGUF_TENSOR_OUT_OF_BOUNDS")).toBeGreaterThan(0);
  });

  it("8000 seeded random bit flips (1-4 bits each)", async () => {
    const next = rng(0x5eed);
    const codes = new Map<string, number>();
    for (let i = 0; i < 8000; i++) {
      const bytes = valid.slice();
      const flips = 1 + Math.floor(next() * 4);
      for (let f = 0; f < flips; f++) {
        const bit = Math.floor(next() * bytes.length * 8);
        bytes[bit >> 3]! ^= 1 << (bit & 7);
      }
      const code = await outcome(bytes);
      codes.set(code, (codes.get(code) ?? 0) + 1);
    }
    // Flips in tensor data or string bytes still parse; flips in structure are refused.
    expect(codes.get("ok")).toBeGreaterThan(100);
    expect([...codes.keys()].filter((c) => c !== "ok").length).toBeGreaterThan(5);
  });

  it("file reads in tiny chunks (7 bytes) agree with the buffer at every truncation point", async () => {
    const path = writeTemp(valid);
    const whole = await readGguf(valid);
    const chunked = await readGguf(path, { firstReadBytes: 7 });
    expect(chunked.tensors).toEqual(whole.tensors);
    expect([...chunked.metadata.keys()]).toEqual([...whole.metadata.keys()]);
    for (let n = 0; n < valid.length; n += 3) {
      const prefix = valid.subarray(0, n);
      const expected = await outcome(prefix);
      let got: string;
      try {
        await readGguf(writeTemp(prefix), { firstReadBytes: 7 });
        got = "ok";
      } catch (error) {
        if (!GgufError.isInstance(error)) throw error;
        got = error.code;
      }
      expect(got, `prefix of ${n} bytes`).toBe(expected);
    }
  });

  it("the file source agrees with the buffer source on a sample of mangled files", async () => {
    const next = rng(77);
    for (let i = 0; i < 100; i++) {
      const bytes = valid.slice();
      const bit = Math.floor(next() * bytes.length * 8);
      bytes[bit >> 3]! ^= 1 << (bit & 7);
      const fromBuffer = await outcome(bytes);
      let fromFile: string;
      try {
        await readGguf(writeTemp(bytes));
        fromFile = "ok";
      } catch (error) {
        if (!GgufError.isInstance(error)) throw error;
        fromFile = error.code;
      }
      expect(fromFile).toBe(fromBuffer);
    }
  });
});
