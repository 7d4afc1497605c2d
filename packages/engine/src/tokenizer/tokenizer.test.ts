import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { readGguf } from "@keepquant/gguf";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { describe, expect, it } from "vitest";
import { BYTE_TO_CHAR, CODE_POINT_TO_BYTE, bytesToByteLevel } from "./byte-unicode.js";
import { vocabOnlyGguf } from "./fixture-gguf.js";
import { QWEN35_PRETOKENIZER_PATTERN, preTokenize, toWellFormed } from "./pre-tokenize.js";
import { StreamingDetokenizer } from "./streaming.js";
import { QWEN35_VOCAB_SIZE, fixtureTokenizer, fixtureVocab, growVocab, oracleGolden, VOCAB_JSON_PATH } from "./test-support.js";
import { Tokenizer } from "./tokenizer.js";
import { TokenizerError } from "./errors.js";
import { TokenType, type TokenizerVocab } from "./vocab.js";

const b64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64");

/** A tiny hand-made vocabulary: the 256 byte symbols, then merge results, then specials. */
function tinyVocab(merges: string[], extra: [string, TokenType][] = []): TokenizerVocab {
  const tokens = [...BYTE_TO_CHAR];
  const tokenTypes: number[] = tokens.map(() => TokenType.NORMAL);
  for (const merge of merges) {
    tokens.push(merge.replace(" ", ""));
    tokenTypes.push(TokenType.NORMAL);
  }
  for (const [text, type] of extra) {
    tokens.push(text);
    tokenTypes.push(type);
  }
  return { model: "gpt2", pre: "qwen35", tokens, tokenTypes, merges, specials: {} };
}

describe("byte-level alphabet", () => {
  it("maps 256 bytes to 256 distinct characters and back", () => {
    expect(new Set(BYTE_TO_CHAR).size).toBe(256);
    expect(BYTE_TO_CHAR[0x41]).toBe("A");
    expect(BYTE_TO_CHAR[0x20]).toBe("Ġ"); // U+0120: space is the 33rd non-printable byte
    expect(BYTE_TO_CHAR[0x0a]).toBe("Ċ");
    expect(BYTE_TO_CHAR[0x00]).toBe("\u0100");
    expect(BYTE_TO_CHAR[0xad]).toBe("\u0143"); // soft hyphen is the last remapped byte
    for (let b = 0; b < 256; b++) expect(CODE_POINT_TO_BYTE[BYTE_TO_CHAR[b]!.charCodeAt(0)]).toBe(b);
    expect(bytesToByteLevel(new TextEncoder().encode(" é"))).toBe("ĠÃ©");
  });
});

describe("qwen35 pre-tokenizer", () => {
  it("splits as the pattern says (hand-checked cases)", () => {
    expect(preTokenize("Hello world")).toEqual(["Hello", " world"]);
    expect(preTokenize("it's DON'T")).toEqual(["it", "'s", " DON", "'T"]);
    expect(preTokenize("x   y")).toEqual(["x", "  ", " y"]); // \s+(?!\S) leaves the last space to the word
    expect(preTokenize("a\n\n  b")).toEqual(["a", "\n\n", " ", " b"]);
    expect(preTokenize("1234")).toEqual(["1", "2", "3", "4"]);
    expect(preTokenize("e\u0301t\u0301")).toEqual(["e\u0301t\u0301"]); // marks stay in the word
    expect(preTokenize("!!!\n\nx")).toEqual(["!!!\n\n", "x"]);
    expect(preTokenize(" {x}")).toEqual([" {", "x", "}"]);
    expect(preTokenize("end  ")).toEqual(["end", "  "]);
  });

  it("follows llama.cpp's whitespace set, not JS \\s: U+0085 is whitespace, U+FEFF is not", () => {
    expect(preTokenize("a\u0085b")).toEqual(["a", "\u0085b"]);
    expect(preTokenize("a\u0085\u0085b")).toEqual(["a", "\u0085", "\u0085b"]);
    expect(preTokenize("a\ufeffb")).toEqual(["a", "\ufeffb"]); // U+FEFF (Cf) is the optional prefix
    expect(preTokenize("a \ufeff")).toEqual(["a", " \ufeff"]);
  });

  it("agrees with the Unicode regex (u flag) on text without those code points", () => {
    const regex = new RegExp(QWEN35_PRETOKENIZER_PATTERN, "gu");
    for (const text of oracleGolden().texts) {
      const wellFormed = toWellFormed(text);
      if (/[\u0085\ufeff\u180e]/u.test(wellFormed)) continue;
      expect(preTokenize(wellFormed)).toEqual(wellFormed.match(regex) ?? []);
    }
  });

  it("replaces lone surrogates by U+FFFD", () => {
    expect(toWellFormed("a\ud800b\udc00")).toBe("a\ufffdb\ufffd");
    expect(toWellFormed("😀")).toBe("😀");
  });
});

describe("BPE", () => {
  it("merges the lowest rank first", () => {
    const first = Tokenizer.fromVocab(tinyVocab(["b c", "a b"]));
    expect(first.encode("abc").map((id) => first.tokenText(id))).toEqual(["a", "bc"]);
    const second = Tokenizer.fromVocab(tinyVocab(["a b", "b c", "ab c"]));
    expect(second.encode("abc").map((id) => second.tokenText(id))).toEqual(["abc"]);
  });

  it("breaks rank ties to the left", () => {
    const tok = Tokenizer.fromVocab(tinyVocab(["a a"]));
    expect(tok.encode("aaa").map((id) => tok.tokenText(id))).toEqual(["aa", "a"]);
    expect(tok.encode("aaaa").map((id) => tok.tokenText(id))).toEqual(["aa", "aa"]);
  });

  it("falls back per byte when a merge result is not a token (ASCII bytes only, as llama.cpp)", () => {
    const vocab = tinyVocab([]);
    const tok = Tokenizer.fromVocab({ ...vocab, merges: ["a b", "Ã ©"] });
    // "ab" is not a token: falls back to "a", "b"
    expect(tok.encode("ab").map((id) => tok.tokenText(id))).toEqual(["a", "b"]);
    // "Ã©" (é) is not a token and its UTF-8 bytes are not ASCII: llama.cpp drops them
    expect(tok.encode("é")).toEqual([]);
  });
});

describe("fixture vocabulary", () => {
  const tok = fixtureTokenizer();

  it("is a real BPE: 256 bytes + 3814 merges + 26 specials, every merge result a token", () => {
    const vocab = fixtureVocab();
    expect(vocab.tokens.length).toBe(4096);
    expect(vocab.merges.length).toBe(3814);
    for (const merge of vocab.merges) expect(tok.tokenId(merge.replace(" ", ""))).toBeDefined();
    // common English words are single tokens
    for (const word of ["the", " the", " and", " function"]) expect(tok.encode(word)).toHaveLength(1);
  });

  it("resolves specials and the end-of-generation set as llama.cpp does", () => {
    const id = (text: string): number => tok.tokenId(text)!;
    expect(tok.bosId).toBe(id("<|endoftext|>"));
    expect(tok.eosId).toBe(id("<|im_end|>"));
    expect(tok.addBos).toBe(false);
    expect([...tok.eogIds].sort((a, b) => a - b)).toEqual(
      ["<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"].map(id),
    );
    // FIM tokens are USER_DEFINED in the file; llama.cpp marks them CONTROL by text
    expect(tok.isControl(id("<|fim_prefix|>"))).toBe(true);
    expect(tok.isControl(id("<think>"))).toBe(false);
    expect(tok.specialTokenCount).toBe(26);
  });

  it("parses control tokens only with parseSpecial, user-defined ones always", () => {
    const imStart = tok.tokenId("<|im_start|>")!;
    const think = tok.tokenId("<think>")!;
    expect(tok.encode("<|im_start|>", { parseSpecial: true })).toEqual([imStart]);
    expect(tok.encode("<|im_start|>", { parseSpecial: false })).not.toContain(imStart);
    expect(tok.encode("<think>", { parseSpecial: false })).toEqual([think]);
    // a control token's text inside another special's text is not matched first (longest first)
    expect(tok.encode("<<think>>", { parseSpecial: false })).toEqual([...tok.encode("<"), think, ...tok.encode(">")]);
  });

  it("renders control tokens only when asked", () => {
    const ids = tok.encode("<|im_start|>user\nhi<|im_end|>", { parseSpecial: true });
    expect(tok.decode(ids)).toBe("user\nhi");
    expect(tok.decode(ids, { special: true })).toBe("<|im_start|>user\nhi<|im_end|>");
  });

  it("round-trips every golden text through encode/decode", () => {
    for (const text of oracleGolden().texts) {
      expect(tok.decode(tok.encode(text))).toBe(toWellFormed(text));
    }
  });

  it("merges on ids when the vocabulary is closed, on texts otherwise, with the same result", () => {
    expect(tok.mergesOnIds).toBe(true);
    // A merge whose result is not a token (and can never apply) forces the text path.
    const open = Tokenizer.fromVocab({ ...fixtureVocab(), merges: [...fixtureVocab().merges, "<think> </think>"] });
    expect(open.mergesOnIds).toBe(false);
    for (const text of oracleGolden().texts.slice(0, 600)) {
      expect(open.encode(text, { parseSpecial: true })).toEqual(tok.encode(text, { parseSpecial: true }));
    }
  });

  it("loads the same from a GGUF header as from JSON", async () => {
    const file = await readGguf(vocabOnlyGguf(fixtureVocab()));
    const fromGguf = Tokenizer.fromGguf(file);
    expect(fromGguf.vocabSize).toBe(tok.vocabSize);
    expect(fromGguf.specials).toEqual(tok.specials);
    expect(fromGguf.chatTemplate).toBe(tok.chatTemplate);
    const text = "Hello <|im_start|> 日本語 🎉 it's\n\n  code();";
    expect(fromGguf.encode(text, { parseSpecial: true })).toEqual(tok.encode(text, { parseSpecial: true }));
  });
});

describe("comparison with llama.cpp (committed oracle golden)", () => {
  const tok = fixtureTokenizer();
  const golden = oracleGolden();

  it("was recorded for this vocabulary", () => {
    const sha = createHash("sha256").update(fs.readFileSync(VOCAB_JSON_PATH)).digest("hex");
    expect(golden.vocabSha256).toBe(sha);
    expect(golden.texts.length).toBeGreaterThanOrEqual(1000);
  });

  it("tokenizes every string as llama.cpp (parseSpecial on and off)", () => {
    let compared = 0;
    const mismatches: string[] = [];
    for (const group of golden.tokenize) {
      golden.texts.forEach((text, i) => {
        const ours = tok.encode(text, { parseSpecial: group.parseSpecial, addSpecial: group.addSpecial });
        compared++;
        if (JSON.stringify(ours) !== JSON.stringify(group.tokens[i])) {
          mismatches.push(`${JSON.stringify(text)} parseSpecial=${group.parseSpecial}`);
        }
      });
    }
    expect(compared).toBe(golden.texts.length * 2);
    expect(mismatches).toEqual([]);
  });

  it("detokenizes and renders pieces as llama.cpp", () => {
    for (const result of golden.detokenize.results) {
      golden.detokenize.sequences.forEach((ids, i) => {
        expect(b64(tok.decodeBytes(ids, { special: result.unparseSpecial }))).toBe(result.bytes[i]);
      });
    }
    for (const group of golden.pieces) {
      group.bytes.forEach((bytes, id) => expect(b64(tok.tokenToPiece(id, { special: group.special }))).toBe(bytes));
    }
  });
});

describe("comparison with llama.cpp (live oracle)", () => {
  const reason = llamaUnavailableReason();

  it.skipIf(reason !== undefined)(
    `re-asks llama.cpp: the golden is current and we still match${reason ? ` (skipped: ${reason})` : ""}`,
    async () => {
      const tok = fixtureTokenizer();
      const golden = oracleGolden();
      const folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-tok-test-"));
      const model = path.join(folder, "vocab.gguf");
      try {
        fs.writeFileSync(model, vocabOnlyGguf(fixtureVocab()));
        for (const group of golden.tokenize) {
          const { tokens } = await runOracle(
            { kind: "tokenize", model, texts: golden.texts, parseSpecial: group.parseSpecial, addSpecial: group.addSpecial },
            { timeoutMs: 60_000 },
          );
          expect(tokens).toEqual(group.tokens);
          golden.texts.forEach((text, i) => {
            expect(tok.encode(text, { parseSpecial: group.parseSpecial, addSpecial: group.addSpecial })).toEqual(tokens[i]);
          });
        }
      } finally {
        fs.rmSync(folder, { recursive: true, force: true });
      }
    },
  );

  it.skipIf(reason !== undefined)(
    `matches llama.cpp with the qwen2 pre-tokenizer too${reason ? ` (skipped: ${reason})` : ""}`,
    async () => {
      const vocab = { ...fixtureVocab(), pre: "qwen2" };
      const tok = Tokenizer.fromVocab(vocab);
      const texts = oracleGolden().texts;
      const folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-tok-test-"));
      const model = path.join(folder, "vocab-qwen2.gguf");
      try {
        fs.writeFileSync(model, vocabOnlyGguf(vocab));
        const { tokens } = await runOracle({ kind: "tokenize", model, texts, parseSpecial: true }, { timeoutMs: 60_000 });
        texts.forEach((text, i) => expect(tok.encode(text, { parseSpecial: true })).toEqual(tokens[i]));
      } finally {
        fs.rmSync(folder, { recursive: true, force: true });
      }
    },
  );

  it.skipIf(reason !== undefined)(
    `matches llama.cpp at Qwen3.5's vocabulary size (248,320 tokens)${reason ? ` (skipped: ${reason})` : ""}`,
    async () => {
      const vocab = growVocab(fixtureVocab(), QWEN35_VOCAB_SIZE);
      const golden = oracleGolden();
      const texts = golden.texts.filter((_, i) => i % 3 === 0);
      const folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-tok-test-"));
      const model = path.join(folder, "vocab-248k.gguf");
      try {
        fs.writeFileSync(model, vocabOnlyGguf(vocab));
        const tok = Tokenizer.fromGguf(await readGguf(model));
        expect(tok.vocabSize).toBe(QWEN35_VOCAB_SIZE);
        for (const parseSpecial of [true, false]) {
          const { tokens } = await runOracle({ kind: "tokenize", model, texts, parseSpecial }, { timeoutMs: 120_000 });
          texts.forEach((text, i) => expect(tok.encode(text, { parseSpecial, addSpecial: false })).toEqual(tokens[i]));
        }
      } finally {
        fs.rmSync(folder, { recursive: true, force: true });
      }
    },
  );
});

describe("StreamingDetokenizer", () => {
  const tok = fixtureTokenizer();

  it("holds back a character split across tokens", () => {
    const ids = tok.encode("日"); // three byte tokens in this small vocabulary
    expect(ids.length).toBe(3);
    const stream = new StreamingDetokenizer(tok);
    expect(ids.map((id) => stream.push(id))).toEqual(["", "", "日"]);
    expect(stream.flush()).toBe("");
  });

  it("emits exactly the final decode, never half a character, on the golden sequences", () => {
    for (const ids of oracleGolden().detokenize.sequences) {
      const stream = new StreamingDetokenizer(tok, { special: true });
      let text = "";
      for (const id of ids) {
        const delta = stream.push(id);
        expect(toWellFormed(delta)).toBe(delta); // no lone surrogate halves
        text += delta;
      }
      text += stream.flush();
      expect(text).toBe(tok.decode(ids, { special: true }));
    }
  });

  it("turns an unfinished character at the end into U+FFFD", () => {
    const ids = tok.encode("日").slice(0, 2);
    const stream = new StreamingDetokenizer(tok);
    expect(stream.pushAll(ids)).toBe("");
    expect(stream.flush()).toBe("\ufffd");
  });
});

describe("errors", () => {
  const base = tinyVocab([]);

  it("names what is wrong", () => {
    const codeOf = (make: () => unknown): string | undefined => {
      try {
        make();
      } catch (error) {
        expect(TokenizerError.isInstance(error)).toBe(true);
        return (error as TokenizerError).code;
      }
      return undefined;
    };
    expect(codeOf(() => Tokenizer.fromVocab({ ...base, model: "llama" }))).toBe("TOKENIZER_UNSUPPORTED_MODEL");
    expect(codeOf(() => Tokenizer.fromVocab({ ...base, pre: "llama3" }))).toBe("TOKENIZER_UNSUPPORTED_PRE");
    // the text -> id map is built on first use, so a duplicate surfaces there
    expect(codeOf(() => Tokenizer.fromVocab({ ...base, tokens: [...base.tokens, "a"], tokenTypes: undefined }).encode("a"))).toBe(
      "TOKENIZER_DUPLICATE_TOKEN",
    );
    expect(codeOf(() => Tokenizer.fromVocab(base).tokenToPiece(256))).toBe("TOKENIZER_BAD_TOKEN_ID");
    expect(codeOf(() => Tokenizer.fromGguf({ metadata: new Map() }))).toBe("TOKENIZER_MISSING_KEY");
  });
});
