import { describe, expect, it } from "vitest";
import { encodeMultimodalChat } from "../chat/encode.js";
import { fixtureTokenizer } from "../tokenizer/test-support.js";
import { assemblePrompt, imagePlaceholders, mediaEntryFields, type EncodedImage } from "./media.js";

const W = 4;

function image(hash: string, gridWidth: number, gridHeight: number): EncodedImage {
  const tokens = gridWidth * gridHeight;
  return { embeddings: Float32Array.from({ length: tokens * W }, (_, i) => i + 1), tokens, gridWidth, gridHeight, hash };
}

describe("prompts with images", () => {
  it("lays out rotary positions as llama.cpp's mtmd does for M-RoPE", () => {
    // text at 0..3; a 3x2 image at t = 4 (rows 4..5, columns 4..6); text continues at 4 + max(3, 2) = 7
    const { tokens, media } = assemblePrompt([[10, 11, 12, 13], image("ab".repeat(32), 3, 2), [20, 21]], W);
    expect(tokens.length).toBe(12);
    expect(Array.from(media!.ropePositions)).toEqual([
      0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 4, 5, 4, 4, 6, 4, 5, 4, 4, 5, 5, 4, 5, 6, 7, 7, 7, 8, 8, 8,
    ]);
    // KV index 12 (the first generated token) sits at 9
    expect(media!.ropeDelta).toBe(-3);
    expect(media!.spans).toEqual([{ start: 4, rows: 6, data: expect.any(Float32Array) }]);
  });

  it("placeholders are negative, differ by image content, and repeat for the same bytes", () => {
    const a = imagePlaceholders("0123456789abcdef", 6);
    expect(a.every((t) => t < 0)).toBe(true);
    expect(new Set(a).size).toBe(6);
    expect(imagePlaceholders("0123456789abcdef", 6)).toEqual(a);
    expect(imagePlaceholders("fedcba9876543210", 6)).not.toEqual(a);
  });

  it("a chunk gets the image rows it covers and every row's rotary position", () => {
    const img = image("cd".repeat(32), 2, 2);
    const { tokens, media } = assemblePrompt([[1, 2], img, [3]], W);
    // chunk [3, 7): image rows 1..3 of the chunk are image tokens 1..3? image spans 2..5
    const fields = mediaEntryFields(media!, tokens.length, 3, 4, W);
    expect(fields.embeddings!.rows).toEqual([0, 1, 2]);
    expect(Array.from(fields.embeddings!.data)).toEqual(Array.from(img.embeddings.subarray(W, 4 * W)));
    // rows 3..5 are image tokens 1..3 at t = 2; row 6 is text at 2 + 2 = 4; KV 7 and later: index - 3
    expect(Array.from(fields.ropePositions!)).toEqual([2, 2, 3, 2, 3, 2, 2, 3, 3, 4, 4, 4]);
    expect(Array.from(mediaEntryFields(media!, tokens.length, 7, 2, W).ropePositions!)).toEqual([5, 5, 5, 6, 6, 6]);
  });

  it("refuses an image whose embeddings or grid do not match", () => {
    expect(() => assemblePrompt([{ ...image("ab", 2, 2), tokens: 5 }], W)).toThrow(/expected 5 x 4 values/);
    expect(() => assemblePrompt([{ ...image("ab", 2, 2), gridWidth: 3 }], W)).toThrow(/does not hold 4 tokens/);
  });

  it("a chat message's image parts sit between the vision markers, the text tokenized around them", () => {
    const tokenizer = fixtureTokenizer();
    const bytes = new Uint8Array([1, 2, 3]);
    const chat = encodeMultimodalChat(tokenizer, [
      {
        role: "user",
        content: [
          { type: "image", image: bytes },
          { type: "text", text: "Describe." },
        ],
      },
    ]);
    expect(chat.images).toEqual([bytes]);
    const [before, slot] = chat.pieces as [number[], { image: number }];
    const after = chat.pieces.slice(2).flat() as number[];
    expect(slot).toEqual({ image: 0 });
    expect(before).toEqual([...tokenizer.encode("<|im_start|>user\n", { parseSpecial: true }), tokenizer.tokenId("<|vision_start|>")]);
    expect(after[0]).toBe(tokenizer.tokenId("<|vision_end|>"));
    expect(after.slice(1)).toEqual(tokenizer.encode("Describe.<|im_end|>\n<|im_start|>assistant\n<think>\n", { parseSpecial: true }));
    expect(chat.text).toBe("<|im_start|>user\n<|vision_start|><image><|vision_end|>Describe.<|im_end|>\n<|im_start|>assistant\n<think>\n");
  });

  it("a user typing the vision markers gets their text, not the control tokens", () => {
    const tokenizer = fixtureTokenizer();
    const chat = encodeMultimodalChat(tokenizer, [{ role: "user", content: [{ type: "text", text: "<|vision_start|>" }] }]);
    const ids = chat.pieces.flat() as number[];
    expect(ids).not.toContain(tokenizer.tokenId("<|vision_start|>"));
  });
});
