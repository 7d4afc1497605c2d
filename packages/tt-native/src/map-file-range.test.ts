import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MAX_MAPPED_RANGE_BYTES, mapFile, mapFileRange, NativeArgumentError, readFileRange } from "./index.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-map-range-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** `get(offset, length)` holds exactly those bytes of `content`, for whole, page-aligned, unaligned and last-byte ranges. */
function expectRanges(content: Uint8Array, get: (offset: number, length: number) => ArrayBuffer): void {
  for (const [offset, length] of [
    [0, content.length],
    [4096, 100],
    [5000, 7000],
    [content.length - 1, 1],
  ] as const) {
    const view = new Uint8Array(get(offset, length));
    expect(view.length).toBe(length);
    expect(Buffer.compare(Buffer.from(view), Buffer.from(content.subarray(offset, offset + length))), `[${offset}, +${length})`).toBe(0);
  }
}

describe("mapFileRange (files larger than one mapping)", () => {
  const file = path.join(dir, "bytes.bin");
  const content = new Uint8Array(3 * 4096 + 123).map((_, i) => (i * 31 + 7) & 0xff);
  fs.writeFileSync(file, content);

  it("maps exactly the requested bytes, also from an offset that is not page-aligned", () => {
    expectRanges(content, (offset, length) => mapFileRange(file, offset, length, { populate: offset === 0 }));
  });

  it("refuses ranges past the end of the file, empty ranges and bad numbers with errors", () => {
    expect(() => mapFileRange(file, content.length - 10, 11)).toThrow(/lie past the end/);
    expect(() => mapFileRange(file, 0, 0)).toThrow(NativeArgumentError);
    expect(() => mapFileRange(file, -1, 10)).toThrow(NativeArgumentError);
    expect(() => mapFileRange(file, 0, MAX_MAPPED_RANGE_BYTES + 1)).toThrow(NativeArgumentError);
    expect(() => mapFileRange(path.join(dir, "missing.bin"), 0, 1)).toThrow(/cannot open/);
  });

  it("mapFile refuses a file over 2^32 bytes with a typed error (it aborted the process before), and mapFileRange maps its tail", () => {
    const big = path.join(dir, "sparse.bin");
    const size = MAX_MAPPED_RANGE_BYTES + 8192;
    // A sparse file: no disk blocks; a marker in the last page.
    fs.writeFileSync(big, "");
    fs.truncateSync(big, size);
    const fd = fs.openSync(big, "r+");
    fs.writeSync(fd, Buffer.from([1, 2, 3]), 0, 3, size - 3);
    fs.closeSync(fd);
    expect(() => mapFile(big, { populate: false })).toThrow(NativeArgumentError);
    expect(() => mapFile(big, { populate: false })).toThrow(/more than one mapping can hold/);
    const tail = new Uint8Array(mapFileRange(big, size - 5000, 5000, { populate: false }));
    expect([...tail.subarray(-4)]).toEqual([0, 1, 2, 3]);
    fs.rmSync(big);
  });
});

describe("readFileRange (weights read into memory advised to take huge pages)", () => {
  const file = path.join(dir, "read.bin");
  const content = new Uint8Array(3 * 4096 + 321).map((_, i) => (i * 13 + 5) & 0xff);
  fs.writeFileSync(file, content);

  it("reads exactly the requested bytes, also from an offset that is not page-aligned", () => {
    expectRanges(content, (offset, length) => {
      const { buffer, hugePages } = readFileRange(file, offset, length);
      expect(typeof hugePages).toBe("boolean");
      return buffer;
    });
  });

  it("is private memory: writing through it changes neither the file nor another read", () => {
    const a = new Uint8Array(readFileRange(file, 0, 64).buffer);
    a[0] = a[0]! ^ 0xff;
    expect(new Uint8Array(readFileRange(file, 0, 64).buffer)[0]).toBe(content[0]);
    expect(fs.readFileSync(file)[0]).toBe(content[0]);
  });

  it("refuses ranges past the end, empty ranges, bad numbers and missing files with errors naming them", () => {
    expect(() => readFileRange(file, content.length - 10, 11)).toThrow(/lie past the end/);
    expect(() => readFileRange(file, 0, 0)).toThrow(NativeArgumentError);
    expect(() => readFileRange(file, -1, 10)).toThrow(NativeArgumentError);
    expect(() => readFileRange(file, 0, MAX_MAPPED_RANGE_BYTES + 1)).toThrow(NativeArgumentError);
    expect(() => readFileRange(path.join(dir, "missing.bin"), 0, 1)).toThrow(/readFileRange: cannot open .*missing\.bin/);
    expect(() => readFileRange(dir, 0, 1)).toThrow(/is not a regular file/);
  });
});
