import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import {
  DefaultModelError,
  defaultModelInfo,
  defaultModelPath,
  parseDefaultModelMetadata,
  sha256OfFile,
  verifyDefaultModel,
} from "./index.js";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const scratch = mkdtempSync(path.join(tmpdir(), "kq-default-model-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

async function codeOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    return DefaultModelError.isInstance(error) ? error.code : `untyped: ${String(error)}`;
  }
}

describe("@keepquant/default-model", () => {
  it("ships the file default-model.json pins (size and sha256)", async () => {
    const info = defaultModelInfo();
    expect(await defaultModelPath()).toBe(info.file);
    expect(await sha256OfFile(info.file)).toBe(info.sha256);
  });

  it("is the very file llama.cpp's goldens were made from (its sha256 is pinned by their manifest)", () => {
    const info = defaultModelInfo();
    if (info.source.kind === "parity-fixture") {
      const manifest = JSON.parse(readFileSync(path.join(repoRoot, "goldens", "parity", "manifest.json"), "utf8")) as {
        fixtures: { name: string; sha256: string; bytes: number }[];
      };
      const pinned = manifest.fixtures.find((f) => f.name === (info.source as { fixture: string }).fixture);
      expect(pinned).toMatchObject({ sha256: info.sha256, bytes: info.bytes });
    } else {
      const manifest = JSON.parse(readFileSync(path.join(repoRoot, "goldens", "default-model", "manifest.json"), "utf8")) as {
        model: { file: string; sha256: string; bytes: number };
      };
      expect(manifest.model).toMatchObject({ sha256: info.sha256, bytes: info.bytes });
      expect(path.resolve(repoRoot, manifest.model.file)).toBe(info.file);
    }
  });

  it("refuses a missing file, a file of another size and a file with other bytes, with typed errors", async () => {
    const info = defaultModelInfo();
    expect(await codeOf(verifyDefaultModel({ ...info, file: path.join(scratch, "absent.gguf") }))).toBe("DEFAULT_MODEL_MISSING");
    expect(await codeOf(verifyDefaultModel({ ...info, file: scratch }))).toBe("DEFAULT_MODEL_MISSING");
    const flipped = path.join(scratch, "flipped.gguf");
    copyFileSync(info.file, flipped);
    const bytes = readFileSync(flipped);
    bytes[bytes.length - 1]! ^= 1;
    writeFileSync(flipped, bytes);
    expect(await codeOf(verifyDefaultModel({ ...info, file: flipped }))).toBe("DEFAULT_MODEL_CORRUPT");
    writeFileSync(flipped, bytes.subarray(0, 100));
    expect(await codeOf(verifyDefaultModel({ ...info, file: flipped }))).toBe("DEFAULT_MODEL_CORRUPT");
  });

  it("refuses malformed metadata naming the field", () => {
    const good = JSON.parse(readFileSync(path.join(repoRoot, "packages", "default-model", "default-model.json"), "utf8")) as Record<
      string,
      unknown
    >;
    expect(() => parseDefaultModelMetadata({ ...good, sha256: "xyz" }, scratch)).toThrow(/sha256 must be 64 lowercase hex digits/);
    expect(() => parseDefaultModelMetadata({ ...good, file: "/etc/passwd" }, scratch)).toThrow(/file must be a path inside the package/);
    expect(() => parseDefaultModelMetadata({ ...good, format: "other" }, scratch)).toThrow(DefaultModelError);
    expect(parseDefaultModelMetadata(good, scratch).file).toBe(path.join(scratch, good.file as string));
  });
});
