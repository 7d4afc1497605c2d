import { describe, expect, it } from "vitest";
import { HubError } from "./errors.js";
import { formatHubReference, isHubReference, parseHubReference } from "./reference.js";
import { modelGroups, quantOfFileName, selectModel } from "./select.js";

describe("hf: references", () => {
  it("parses owner/repo, the tag and the revision", () => {
    expect(parseHubReference("hf:unsloth/Qwen3.5-0.8B-GGUF")).toEqual({
      repo: "unsloth/Qwen3.5-0.8B-GGUF",
      tag: undefined,
      revision: "main",
    });
    expect(parseHubReference("hf:unsloth/Qwen3.5-0.8B-GGUF:q8_0@v1.0")).toEqual({
      repo: "unsloth/Qwen3.5-0.8B-GGUF",
      tag: "q8_0",
      revision: "v1.0",
    });
    expect(parseHubReference("hf:a/b:Q8_0/model-Q8_0-00001-of-00002.gguf")).toEqual({
      repo: "a/b",
      tag: "Q8_0/model-Q8_0-00001-of-00002.gguf",
      revision: "main",
    });
    expect(formatHubReference(parseHubReference("hf:a/b:Q4_K_M@main"))).toBe("hf:a/b:Q4_K_M");
    expect(isHubReference("hf:a/b")).toBe(true);
    expect(isHubReference("./hf:a/b.gguf")).toBe(false);
  });

  it.each([
    ["hf:justonename", "is not <owner>/<repo>"],
    ["hf:a/b/c", "is not <owner>/<repo>"],
    ["hf:a/b:", "is not a quant tag or file name"],
    ["hf:a/..", "is not a valid owner or repository name"],
    ["hf:a/b@", "is not a revision"],
    ["hf:a/b:../x.gguf", "is not a quant tag or file name"],
  ])("refuses %s naming what is wrong", (text, why) => {
    let error: unknown;
    try {
      parseHubReference(text);
    } catch (thrown) {
      error = thrown;
    }
    expect(HubError.isInstance(error) && error.code).toBe("HUB_BAD_REFERENCE");
    expect((error as Error).message).toContain(why);
    expect((error as HubError).field).toBe(text);
  });
});

describe("picking the model file as llama.cpp's -hf does", () => {
  const files = [
    "README.md",
    "Qwen3.5-9B-Q4_K_M.gguf",
    "Qwen3.5-9B-Q4_K_S.gguf",
    "Qwen3.5-9B-UD-Q4_K_XL.gguf",
    "Qwen3.5-9B-Q8_0.gguf",
    "BF16/Qwen3.5-9B-BF16-00002-of-00002.gguf",
    "BF16/Qwen3.5-9B-BF16-00001-of-00002.gguf",
    "mmproj-F16.gguf",
    "mmproj-BF16.gguf",
    "Qwen3.5-9B-MTP-Q8_0.gguf",
  ];

  it("reads the quant from a file name", () => {
    expect(quantOfFileName("Qwen3.5-9B-Q4_K_M.gguf")).toBe("Q4_K_M");
    expect(quantOfFileName("Qwen3.5-9B-UD-Q4_K_XL.gguf")).toBe("UD-Q4_K_XL");
    expect(quantOfFileName("x/Qwen3.5-9B-BF16-00001-of-00002.gguf")).toBe("BF16");
    expect(quantOfFileName("model.gguf")).toBeUndefined();
  });

  it("groups split shards in order and leaves companions out", () => {
    expect(modelGroups(files).map((g) => [g.name, g.files.length])).toEqual([
      ["BF16/Qwen3.5-9B-BF16.gguf", 2],
      ["Qwen3.5-9B-Q4_K_M.gguf", 1],
      ["Qwen3.5-9B-Q4_K_S.gguf", 1],
      ["Qwen3.5-9B-Q8_0.gguf", 1],
      ["Qwen3.5-9B-UD-Q4_K_XL.gguf", 1],
    ]);
  });

  it("defaults to Q4_K_M, matches tags case-insensitively as whole words, and takes every shard", () => {
    expect(selectModel("o/r", files, undefined).model.files).toEqual(["Qwen3.5-9B-Q4_K_M.gguf"]);
    expect(selectModel("o/r", files, "q8_0").model.files).toEqual(["Qwen3.5-9B-Q8_0.gguf"]);
    expect(selectModel("o/r", files, "ud-q4_k_xl").model.files).toEqual(["Qwen3.5-9B-UD-Q4_K_XL.gguf"]);
    expect(selectModel("o/r", files, "BF16").model.files).toEqual([
      "BF16/Qwen3.5-9B-BF16-00001-of-00002.gguf",
      "BF16/Qwen3.5-9B-BF16-00002-of-00002.gguf",
    ]);
    expect(selectModel("o/r", files, "Qwen3.5-9B-Q4_K_S.gguf").model.files).toEqual(["Qwen3.5-9B-Q4_K_S.gguf"]);
    expect(selectModel("o/r", files, "Qwen3.5-9B-BF16-00001-of-00002.gguf").model.files).toHaveLength(2);
  });

  it("names the companions: the vision projector of the same precision family, the MTP drafter", () => {
    const picked = selectModel("o/r", files, "BF16");
    expect(picked.mmproj).toBe("mmproj-BF16.gguf");
    expect(picked.mtp).toBe("Qwen3.5-9B-MTP-Q8_0.gguf");
    expect(selectModel("o/r", files, "Q4_K_M").mmproj).toBe("mmproj-F16.gguf");
  });

  it("takes a repository's only model when no tag is given and it is not Q4_K_M", () => {
    expect(selectModel("o/r", ["model-Q8_0.gguf", "mmproj-F16.gguf"], undefined).model.files).toEqual(["model-Q8_0.gguf"]);
  });

  it("lists what the repository has when a tag matches nothing, and the matches when it matches several", () => {
    expect(() => selectModel("o/r", files, "Q2_K")).toThrow(
      "o/r has no model file matching Q2_K: it has: BF16 (2 shards), Q4_K_M, Q4_K_S, Q8_0, UD-Q4_K_XL",
    );
    expect(() => selectModel("o/r", ["a-Q4_K_M.gguf", "b-Q4_K_M.gguf"], undefined)).toThrow(
      /matches 2 models \(a-Q4_K_M.gguf, b-Q4_K_M.gguf\)/,
    );
    expect(() => selectModel("o/r", ["README.md"], undefined)).toThrow("it has no GGUF model files");
  });
});
