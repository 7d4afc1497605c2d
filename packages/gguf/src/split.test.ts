import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { getArchitecture, getMetadata } from "./metadata.js";
import { readGguf, readTensorBytes } from "./reader.js";
import {
  parseShardName,
  readGgufModel,
  shardPath,
  splitGgufBytes,
  splitGgufInput,
  splitInfo,
  SPLIT_COUNT_KEY,
  SPLIT_NO_KEY,
  SPLIT_TENSORS_COUNT_KEY,
} from "./split.js";
import { QWEN35_TEST_SHAPE, synthesizeQwen35 } from "./synthetic/qwen35.js";
import { GgmlType } from "./ggml-type.js";
import { gguf, writeGguf } from "./writer.js";

const WHOLE = synthesizeQwen35(QWEN35_TEST_SHAPE);

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-gguf-split-"));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Writes `shards` as `<dir>/<stem>-0000i-of-0000n.gguf`; returns their paths. */
function writeShards(shards: readonly Uint8Array[], stem = "model"): string[] {
  return shards.map((bytes, i) => {
    const file = shardPath(path.join(dir, stem), i, shards.length);
    fs.writeFileSync(file, bytes);
    return file;
  });
}

describe("shard names", () => {
  it("reads and writes gguf-split's five-digit names", () => {
    expect(shardPath("/m/Qwen3.5-27B-Q4_K_M", 1, 3)).toBe("/m/Qwen3.5-27B-Q4_K_M-00002-of-00003.gguf");
    expect(parseShardName("/m/Qwen3.5-27B-Q4_K_M-00002-of-00003.gguf")).toEqual({ prefix: "/m/Qwen3.5-27B-Q4_K_M", index: 1, count: 3 });
    expect(parseShardName("a-00004-of-00003.gguf")).toBeUndefined();
    expect(parseShardName("a-00000-of-00003.gguf")).toBeUndefined();
    expect(parseShardName("a-0001-of-0003.gguf")).toBeUndefined();
    expect(parseShardName("model.gguf")).toBeUndefined();
  });
});

describe("splitGgufInput", () => {
  it("spreads tensors as evenly as possible, the metadata in the first shard, split keys in every shard", async () => {
    const shards = await splitGgufBytes(WHOLE, 4);
    const files = await Promise.all(shards.map((s) => readGguf(s)));
    const whole = await readGguf(WHOLE);
    const counts = files.map((f) => f.tensors.length);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(whole.tensors.length);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
    files.forEach((f, i) => {
      expect(splitInfo(f)).toEqual({ index: i, count: 4, tensorsCount: whole.tensors.length });
      expect(getArchitecture(f)).toBe(i === 0 ? "qwen35" : undefined);
    });
  });

  it("refuses a shard count it cannot honour", () => {
    const input = { metadata: [], tensors: [{ name: "a", type: GgmlType.F32, ne: [1], data: new Uint8Array(4) }] };
    expect(() => splitGgufInput(input, 2)).toThrow(RangeError);
    expect(() => splitGgufInput(input, 1)).toThrow(RangeError);
  });
});

describe("readGgufModel", () => {
  it("returns a file that is a whole model as readGguf does", async () => {
    const file = path.join(dir, "whole.gguf");
    fs.writeFileSync(file, WHOLE);
    const model = await readGgufModel(file);
    expect(model.shards).toBeUndefined();
    expect(model.tensors.map((t) => t.name)).toEqual((await readGguf(WHOLE)).tensors.map((t) => t.name));
  });

  it("merges every shard: the first shard's metadata, all tensors with their shard and bytes, the sizes summed", async () => {
    const paths = writeShards(await splitGgufBytes(WHOLE, 3));
    const whole = await readGguf(WHOLE);
    const model = await readGgufModel(paths[0]!);
    expect(model.source).toBe(paths[0]);
    expect(model.shards?.map((s) => s.source)).toEqual(paths);
    expect(model.fileSize).toBe(paths.reduce((sum, p) => sum + fs.statSync(p).size, 0));
    expect(getArchitecture(model)).toBe("qwen35");
    expect(getMetadata(model, "qwen35.block_count")).toBe(getMetadata(whole, "qwen35.block_count"));
    expect(model.tensors.map((t) => [t.name, t.type, t.ne])).toEqual(whole.tensors.map((t) => [t.name, t.type, t.ne]));
    expect(new Set(model.tensors.map((t) => t.shard))).toEqual(new Set([0, 1, 2]));
    for (const [i, tensor] of model.tensors.entries()) {
      const expected = WHOLE.subarray(whole.tensors[i]!.offset, whole.tensors[i]!.offset + whole.tensors[i]!.byteLength);
      const got = await readTensorBytes(model.shards![tensor.shard!]!.source, tensor);
      expect(Buffer.from(got).equals(Buffer.from(expected)), tensor.name).toBe(true);
    }
  });

  it("finds the first shard from any other shard", async () => {
    const paths = writeShards(await splitGgufBytes(WHOLE, 3));
    const model = await readGgufModel(paths[2]!);
    expect(model.source).toBe(paths[0]);
    expect(model.shards).toHaveLength(3);
  });

  it("reads shards from byte sources through openShard", async () => {
    const shards = await splitGgufBytes(WHOLE, 2);
    const model = await readGgufModel(shards[0]!, { openShard: (index) => shards[index]! });
    expect(model.tensors).toHaveLength((await readGguf(WHOLE)).tensors.length);
    const error = await readGgufModel(shards[0]!).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "GGUF_BAD_SPLIT" });
    expect((error as Error).message).toContain("read it from its path");
  });

  it("names a missing shard", async () => {
    const paths = writeShards(await splitGgufBytes(WHOLE, 3));
    fs.rmSync(paths[1]!);
    const error = await readGgufModel(paths[0]!).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "GGUF_BAD_SPLIT" });
    expect((error as Error).message).toContain(`shard 2 of 3 (${paths[1]})`);
  });

  it("refuses a shard of another split, a renamed first shard, and a name that disagrees with split.count", async () => {
    const paths = writeShards(await splitGgufBytes(WHOLE, 3));
    // shard 2 replaced by shard 2 of a two-shard split
    const other = await splitGgufBytes(WHOLE, 2);
    fs.writeFileSync(paths[1]!, other[1]!);
    await expect(readGgufModel(paths[0]!)).rejects.toMatchObject({
      code: "GGUF_BAD_SPLIT",
      message: expect.stringContaining("should be shard 2 of 3"),
    });

    const renamed = path.join(dir, "renamed.gguf");
    fs.copyFileSync(paths[0]!, renamed);
    await expect(readGgufModel(renamed)).rejects.toMatchObject({
      code: "GGUF_BAD_SPLIT",
      message: expect.stringContaining("its other shards cannot be found"),
    });

    const misnamed = path.join(dir, "m-00001-of-00004.gguf");
    fs.copyFileSync(paths[0]!, misnamed);
    await expect(readGgufModel(misnamed)).rejects.toMatchObject({
      code: "GGUF_BAD_SPLIT",
      message: expect.stringContaining("the name says 4 shards"),
    });
  });

  it("refuses a tensor held by two shards and a tensor count that disagrees with split.tensors.count", async () => {
    const tensor = (name: string) => ({ name, type: GgmlType.F32, ne: [4], data: new Uint8Array(16) });
    const keys = (no: number, tensors: number) => [
      gguf.u16(SPLIT_NO_KEY, no),
      gguf.u16(SPLIT_COUNT_KEY, 2),
      gguf.i32(SPLIT_TENSORS_COUNT_KEY, tensors),
    ];
    writeShards(
      [writeGguf({ metadata: keys(0, 2), tensors: [tensor("a")] }), writeGguf({ metadata: keys(1, 2), tensors: [tensor("a")] })],
      "dup",
    );
    await expect(readGgufModel(shardPath(path.join(dir, "dup"), 0, 2))).rejects.toMatchObject({
      code: "GGUF_BAD_SPLIT",
      message: expect.stringContaining('tensor "a" is in two shards'),
    });
    writeShards(
      [writeGguf({ metadata: keys(0, 3), tensors: [tensor("a")] }), writeGguf({ metadata: keys(1, 3), tensors: [tensor("b")] })],
      "count",
    );
    await expect(readGgufModel(shardPath(path.join(dir, "count"), 0, 2))).rejects.toMatchObject({
      code: "GGUF_BAD_SPLIT",
      message: expect.stringContaining("split.tensors.count says 3 tensors, the 2 shards hold 2"),
    });
  });

  it("refuses split keys out of range", async () => {
    const bad = writeGguf({ metadata: [gguf.u16(SPLIT_NO_KEY, 2), gguf.u16(SPLIT_COUNT_KEY, 2)], tensors: [] });
    await expect(readGgufModel(bad)).rejects.toMatchObject({ code: "GGUF_BAD_SPLIT", field: SPLIT_NO_KEY });
    const negative = writeGguf({ metadata: [gguf.i32(SPLIT_COUNT_KEY, -3)], tensors: [] });
    await expect(readGgufModel(negative)).rejects.toMatchObject({ code: "GGUF_BAD_SPLIT", field: SPLIT_COUNT_KEY });
  });
});
