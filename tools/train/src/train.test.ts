import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildLoadPlan, qwen35SpecLayout, readGguf } from "@keepquant/gguf";
import { QWEN_STYLE_TEMPLATE } from "@keepquant/engine";
import { trainBpe, withSpecialTokens } from "./bpe.js";
import { splitDocuments, splitFortunes, trainingTexts } from "./corpus.js";
import { dequantizedTensors, writeTensorFile } from "./dequantize-gguf.js";
import { exportGguf, exportSpec } from "./export-gguf.js";
import { isEnglishWord, words } from "./quality.js";
import { readRecipe } from "./recipe.js";
import { TensorFileError, readTensorFile } from "./tensor-file.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-train-test-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const recipe = readRecipe();

/** A small vocabulary (trained here) in the vocab.json format. */
function tinyVocab(): unknown {
  const trained = trainBpe(["the cat sat on the mat", "the dog ate the cat's hat"], 20);
  const { tokens, tokenTypes, specials } = withSpecialTokens(trained);
  return {
    format: "keepquant-bpe-vocab/1",
    model: "gpt2",
    pre: "qwen35",
    addBos: false,
    specials,
    tokens,
    tokenTypes,
    merges: trained.merges,
    chatTemplate: QWEN_STYLE_TEMPLATE,
  };
}

describe("corpus", () => {
  it("splits fortune files on '%' lines, drops overstrike and empty documents", () => {
    const text = "First one.\n\t-- Someone\n%\n_\bu_\bn_\bd_\be_\br_\bl_\bi_\bn_\be_\bd\n%\n%\nLast\n";
    expect(splitFortunes(text)).toEqual(["First one.\n\t-- Someone", "underlined", "Last"]);
  });

  it("holds out a fixed, disjoint validation split; chat wrapping is seeded", () => {
    const docs = Array.from({ length: 1000 }, (_, i) => `fortune ${i}`);
    const a = splitDocuments(docs, recipe);
    expect(splitDocuments(docs, recipe)).toEqual(a);
    expect(a.validation).toHaveLength(Math.round(1000 * recipe.corpus.validationFraction));
    expect(new Set([...a.train, ...a.validation]).size).toBe(1000);
    const texts = trainingTexts(a.train, recipe);
    expect(trainingTexts(a.train, recipe)).toEqual(texts);
    const chat = texts.filter((t) => t.startsWith("<|im_start|>user\n")).length;
    expect(chat / texts.length).toBeGreaterThan(recipe.corpus.chatFraction - 0.05);
    expect(chat / texts.length).toBeLessThan(recipe.corpus.chatFraction + 0.05);
  });
});

describe("export", () => {
  const vocab = tinyVocab();
  const shape = { ...recipe.model, hidden: 32, ffn: 64, headDim: 32, ropeDims: 16, ssmStateSize: 16 };
  const layout = qwen35SpecLayout(exportSpec({ name: "t", shape, vocab }));
  const tensors = layout.tensors.map((t, i) => {
    const shapeRowMajor = [...t.ne].reverse();
    const data = new Float32Array(t.ne.reduce((a, b) => a * b, 1)).map((_, j) => ((i * 31 + j) % 17) / 17 - 0.5);
    return { name: t.name, shape: shapeRowMajor, data };
  });

  it("writes every tensor the loader expects; the load plan refuses nothing; a KQTW round trip is exact", async () => {
    const bytes = exportGguf({ name: "t", shape, vocab, tensors });
    const file = await readGguf(bytes);
    const plan = buildLoadPlan(file);
    expect(plan.refused).toEqual([]);
    expect(file.tensors.map((t) => t.name).sort()).toEqual(tensors.map((t) => t.name).sort());
    const gguf = path.join(dir, "t.gguf");
    fs.writeFileSync(gguf, bytes);
    const kqtw = path.join(dir, "t.kqtw");
    writeTensorFile(kqtw, await dequantizedTensors(gguf));
    const back = readTensorFile(kqtw).tensors;
    for (const t of tensors) {
      const found = back.find((b) => b.name === t.name)!;
      expect(found.shape).toEqual(t.shape);
      expect(Array.from(found.data)).toEqual(Array.from(t.data));
    }
  });

  it("names a missing tensor, a misshapen one and an unknown one", () => {
    expect(() => exportGguf({ name: "t", shape, vocab, tensors: tensors.slice(1) })).toThrow(
      new RegExp(`${tensors[0]!.name.replace(/\./g, "\\.")}.*missing`),
    );
    const bad = tensors.map((t, i) => (i === 2 ? { ...t, shape: [...t.shape].reverse() } : t));
    if (tensors[2]!.shape.length > 1 && tensors[2]!.shape[0] !== tensors[2]!.shape[1]) {
      expect(() => exportGguf({ name: "t", shape, vocab, tensors: bad })).toThrow(/loader expects/);
    }
    expect(() =>
      exportGguf({ name: "t", shape, vocab, tensors: [...tensors, { name: "blk.99.x.weight", shape: [1], data: new Float32Array(1) }] }),
    ).toThrow(TensorFileError);
  });

  it("a truncated or foreign tensor file is a TensorFileError naming the file", () => {
    const file = path.join(dir, "bad.kqtw");
    fs.writeFileSync(file, "not a tensor file at all");
    expect(() => readTensorFile(file)).toThrow(/bad\.kqtw: not a KQTW0001/);
    writeTensorFile(file, [{ name: "w", shape: [4], data: new Float32Array(4) }]);
    fs.truncateSync(file, fs.statSync(file).size - 4);
    expect(() => readTensorFile(file)).toThrow(/tensor w .* runs past the end/);
  });
});

describe("quality words", () => {
  const list = new Set(["the", "cat", "don't", "Paris", "dog's"]);
  it("counts letter runs with inner apostrophes; case-insensitive toward lower case", () => {
    expect(words("The cat -- don't! 42 dog's, Paris; xqz")).toEqual(["The", "cat", "don't", "dog's", "Paris", "xqz"]);
    expect(["The", "THE", "cat", "don't", "Paris", "dog's"].every((w) => isEnglishWord(w, list))).toBe(true);
    expect(isEnglishWord("xqz", list)).toBe(false);
    expect(isEnglishWord("paris", list)).toBe(false);
  });
});
