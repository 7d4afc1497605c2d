/**
 * GGUF byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2") with the qwen35 pre-tokenizer,
 * following llama.cpp's llama_tokenize / llama_token_to_piece / llama_detokenize.
 */
import { byteOfCodePoint } from "./byte-unicode.js";
import { BpeModel } from "./bpe.js";
import { TokenizerError } from "./errors.js";
import { type PreTokenizerName, PreTokenizerScanner, SUPPORTED_PRE_TOKENIZERS, toWellFormed } from "./pre-tokenize.js";
import {
  type GgufMetadataSource,
  type SpecialTokenIds,
  TokenAttr,
  type TokenizerVocab,
  tokenTypeToAttr,
  vocabFromGguf,
  vocabFromJson,
} from "./vocab.js";

export interface EncodeOptions {
  /** Add BOS/EOS when the vocabulary asks for them (add_bos_token / add_eos_token). Default true. */
  addSpecial?: boolean;
  /** Recognize CONTROL and UNKNOWN token texts (e.g. "<|im_start|>") in the input. Default false. */
  parseSpecial?: boolean;
  /**
   * With `parseSpecial`: maps each run of text between the special tokens found in the input
   * before it is encoded, and that result is encoded as plain text (special-token texts in it stay
   * text). `encodeChat` uses it to turn the sentinels standing for user text back into that text.
   */
  mapPlainText?: (fragment: string) => string;
}

/**
 * The part of an AbortSignal `encodeAsync` uses (declared here so that the type declarations need neither
 * the DOM library nor @types/node; a real AbortSignal fits it).
 */
export interface EncodeAbortSignal {
  readonly aborted: boolean;
  throwIfAborted(): void;
}

export interface EncodeAsyncOptions extends EncodeOptions {
  /**
   * Steps of work between two yields to the event loop (default TOKENIZER_SLICE_STEPS). A step is one
   * code point classified by the pre-tokenizer, one BPE merge candidate queued or taken, or one
   * character scanned for special tokens.
   */
  sliceSteps?: number;
  /** Stops the encode between two slices: the promise rejects with the signal's reason. An AbortSignal. */
  signal?: EncodeAbortSignal;
  /** Called with the steps done so far after each slice (progress, and tests that count the work). */
  onSlice?: (steps: number) => void;
}

/**
 * Work per slice of `encodeAsync` (about a few milliseconds of the slowest step kind): between two
 * slices the event loop runs, so a long prompt never stalls other requests.
 */
export const TOKENIZER_SLICE_STEPS = 1 << 16;

/** The work counter of one encode: stages add their steps; a stage yields once its slice is used up. */
interface WorkMeter {
  steps: number;
  sliceEnd: number;
}

export interface DecodeOptions {
  /** Render CONTROL/UNKNOWN tokens as their text (otherwise they render as nothing). Default false. */
  special?: boolean;
  /** Drop a leading BOS / trailing EOS when the vocabulary adds them. Default false. */
  removeSpecial?: boolean;
}

// Texts llama.cpp recognizes to fill unset special ids and the end-of-generation set.
const EOT_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|end_of_text|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "<｜end▁of▁sentence｜>",
  "<end_of_utterance>",
];
const EOM_TEXTS = ["<|eom_id|>"];
const FIM_PRE_TEXTS = [
  "<|fim_prefix|>",
  "<fim-prefix>",
  "<fim_prefix>",
  "<｜fim▁begin｜>",
  "<PRE>",
  "▁<PRE>",
  "<|code_prefix|>",
  "<|prefix|>",
];
const FIM_SUF_TEXTS = [
  "<|fim_suffix|>",
  "<fim-suffix>",
  "<fim_suffix>",
  "<｜fim▁hole｜>",
  "<SUF>",
  "▁<SUF>",
  "<|code_suffix|>",
  "<|suffix|>",
];
const FIM_MID_TEXTS = [
  "<|fim_middle|>",
  "<fim-middle>",
  "<fim_middle>",
  "<｜fim▁end｜>",
  "<MID>",
  "▁<MID>",
  "<|code_middle|>",
  "<|middle|>",
];
const FIM_PAD_TEXTS = ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS = ["<|file_sep|>"];
const EOG_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<|flush|>",
  "<|calls|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "</s>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "[EOS]",
  "<|end_of_text|>",
  "<end_of_utterance>",
  "<eos>",
  "<turn|>",
  "<|tool_response>",
  "<｜end▁of▁sentence｜>",
  "[e~[",
];
/** Always rendered (gpt-oss): llama.cpp forces them to USER_DEFINED. */
const FORCED_USER_DEFINED_TEXTS = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/** GPT-2 BPE vocabularies default BOS and EOS to id 11 when the file does not say (llama.cpp). */
const GPT2_DEFAULT_BOS_EOS = 11;

/** Resolved special ids (undefined = none). */
export interface ResolvedSpecialTokens extends SpecialTokenIds {}

const utf8Encoder = new TextEncoder();

function utf8Length(text: string): number {
  let length = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) length += 1;
    else if (c < 0x800) length += 2;
    else if (c >= 0xd800 && c <= 0xdbff) {
      length += 4;
      i++;
    } else length += 3;
  }
  return length;
}

export class Tokenizer {
  readonly vocab: TokenizerVocab;
  readonly pre: PreTokenizerName;
  readonly vocabSize: number;
  /** Special ids after defaults and auto-detection by text. */
  readonly specials: Readonly<ResolvedSpecialTokens>;
  readonly addBos: boolean;
  readonly addEos: boolean;
  /** End-of-generation ids: EOS, EOT, EOM and the tokens llama.cpp detects by text. */
  readonly eogIds: ReadonlySet<number>;
  /** Attribute bits per id (TokenAttr), after auto-detection. */
  readonly attrs: Uint16Array;

  private readonly addSpacePrefix: boolean;
  /** CONTROL / USER_DEFINED / UNKNOWN ids, longest text (in UTF-8 bytes) first, then lowest id. */
  private readonly specialCache: readonly number[];
  private tokenToIdMap: Map<string, number> | undefined;
  private bpeModel: BpeModel | undefined;
  private readonly pieceCache = new Map<number, Uint8Array>();
  /** null until computed (undefined is a value: no bound). */
  private maxTokenBytesValue: number | undefined | null = null;

  private constructor(vocab: TokenizerVocab) {
    if (vocab.model !== "gpt2") {
      throw new TokenizerError(
        "TOKENIZER_UNSUPPORTED_MODEL",
        `tokenizer.ggml.model "${vocab.model}" is not supported (only "gpt2", byte-level BPE)`,
        { field: "tokenizer.ggml.model" },
      );
    }
    if (!(SUPPORTED_PRE_TOKENIZERS as readonly string[]).includes(vocab.pre)) {
      throw new TokenizerError(
        "TOKENIZER_UNSUPPORTED_PRE",
        `tokenizer.ggml.pre "${vocab.pre}" is not supported (supported: ${SUPPORTED_PRE_TOKENIZERS.join(", ")})`,
        { field: "tokenizer.ggml.pre" },
      );
    }
    const n = vocab.tokens.length;
    if (vocab.tokenTypes && vocab.tokenTypes.length < n) {
      throw new TokenizerError("TOKENIZER_BAD_KEY", `tokenizer.ggml.token_type has ${vocab.tokenTypes.length} entries for ${n} tokens`, {
        field: "tokenizer.ggml.token_type",
      });
    }
    this.vocab = vocab;
    this.pre = vocab.pre as PreTokenizerName;
    this.vocabSize = n;
    this.addBos = vocab.addBos ?? false;
    this.addEos = vocab.addEos ?? false;
    this.addSpacePrefix = vocab.addSpacePrefix ?? false;

    const attrs = new Uint16Array(n);
    for (let id = 0; id < n; id++) {
      attrs[id] = vocab.tokenTypes ? tokenTypeToAttr(vocab.tokenTypes[id]!) : TokenAttr.NORMAL;
    }
    this.attrs = attrs;

    // Special ids: GPT-2 defaults, then the file's values when in range.
    const specials: ResolvedSpecialTokens = {};
    if (GPT2_DEFAULT_BOS_EOS < n) {
      specials.bos = GPT2_DEFAULT_BOS_EOS;
      specials.eos = GPT2_DEFAULT_BOS_EOS;
    }
    for (const [name, id] of Object.entries(vocab.specials) as [keyof SpecialTokenIds, number | undefined][]) {
      if (id !== undefined && Number.isInteger(id) && id >= 0 && id < n) specials[name] = id;
    }

    // Auto-detect unset ids by text (lowest id first when several texts match) and mark them CONTROL.
    // One pass over the tokens for the few texts of interest; the full text -> id map is built lazily.
    const byText = findTexts(vocab.tokens, [
      ...EOT_TEXTS,
      ...EOM_TEXTS,
      ...FIM_PRE_TEXTS,
      ...FIM_SUF_TEXTS,
      ...FIM_MID_TEXTS,
      ...FIM_PAD_TEXTS,
      ...FIM_REP_TEXTS,
      ...FIM_SEP_TEXTS,
      ...EOG_TEXTS,
      ...FORCED_USER_DEFINED_TEXTS,
      "<|end|>",
      "</s>",
    ]);
    const detect = (name: keyof SpecialTokenIds, texts: readonly string[]): void => {
      if (specials[name] !== undefined) return;
      let found: number | undefined;
      for (const text of texts) {
        const id = byText.get(text);
        if (id !== undefined && (found === undefined || id < found)) found = id;
      }
      if (found === undefined) return;
      specials[name] = found;
      attrs[found] = attrs[found]! | TokenAttr.CONTROL;
    };
    detect("eot", EOT_TEXTS);
    detect("eom", EOM_TEXTS);
    detect("fimPre", FIM_PRE_TEXTS);
    detect("fimSuf", FIM_SUF_TEXTS);
    detect("fimMid", FIM_MID_TEXTS);
    detect("fimPad", FIM_PAD_TEXTS);
    detect("fimRep", FIM_REP_TEXTS);
    detect("fimSep", FIM_SEP_TEXTS);

    // CONTROL tokens whose text says "unused" are unused.
    for (let id = 0; id < n; id++) {
      if (attrs[id]! & TokenAttr.CONTROL && vocab.tokens[id]!.includes("unused")) {
        attrs[id] = attrs[id]! | TokenAttr.UNUSED;
      }
    }

    const eog = new Set<number>();
    for (const id of [specials.fimPad, specials.fimRep, specials.fimSep]) if (id !== undefined) eog.add(id);
    for (const text of EOG_TEXTS) {
      const id = byText.get(text);
      if (id === undefined) continue;
      eog.add(id);
      attrs[id] = attrs[id]! | TokenAttr.CONTROL;
    }
    for (const text of FORCED_USER_DEFINED_TEXTS) {
      const id = byText.get(text);
      if (id !== undefined) attrs[id] = TokenAttr.USER_DEFINED;
    }
    for (const id of [specials.eos, specials.eot, specials.eom]) if (id !== undefined) eog.add(id);
    // o200k_harmony / solar-open: "<|end|>" is not end-of-generation when these are present.
    const has = (text: string): boolean => {
      const id = byText.get(text);
      return id !== undefined && eog.has(id);
    };
    const endId = byText.get("<|end|>");
    if (
      endId !== undefined &&
      eog.has(endId) &&
      ((has("<|return|>") && (has("<|call|>") || has("<|calls|>"))) || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>")))
    ) {
      eog.delete(endId);
      attrs[endId] = TokenAttr.USER_DEFINED;
    }
    // gemma4 / paddleocr: "</s>" is not end-of-generation next to "<|tool_response>".
    const sId = byText.get("</s>");
    if (sId !== undefined && eog.has(sId) && has("<|tool_response>")) {
      eog.delete(sId);
      attrs[sId] = TokenAttr.NORMAL;
    }
    this.specials = specials;
    this.eogIds = eog;

    const cache: number[] = [];
    const special = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN;
    for (let id = 0; id < n; id++) if (attrs[id]! & special) cache.push(id);
    const lengths = new Map(cache.map((id) => [id, utf8Length(vocab.tokens[id]!)]));
    cache.sort((a, b) => lengths.get(b)! - lengths.get(a)! || a - b);
    this.specialCache = cache;
  }

  /** From a GGUF header (`readGguf` result or anything with its metadata map). */
  static fromGguf(file: GgufMetadataSource): Tokenizer {
    return new Tokenizer(vocabFromGguf(file));
  }

  static fromVocab(vocab: TokenizerVocab): Tokenizer {
    return new Tokenizer(vocab);
  }

  /** From the parsed JSON of goldens/tokenizer/vocab.json (format: see TokenizerVocab). */
  static fromJson(json: unknown): Tokenizer {
    return new Tokenizer(vocabFromJson(json));
  }

  get bosId(): number | undefined {
    return this.specials.bos;
  }

  get eosId(): number | undefined {
    return this.specials.eos;
  }

  get eotId(): number | undefined {
    return this.specials.eot;
  }

  get padId(): number | undefined {
    return this.specials.pad;
  }

  get chatTemplate(): string | undefined {
    return this.vocab.chatTemplate;
  }

  /**
   * The texts only `parseSpecial` turns into tokens (CONTROL and UNKNOWN tokens, e.g.
   * "<|im_start|>"), longest first. USER_DEFINED texts (e.g. "<think>") are recognized always, as
   * in llama.cpp.
   */
  get parseSpecialTexts(): readonly string[] {
    const texts: string[] = [];
    for (const id of this.specialCache) {
      const text = this.vocab.tokens[id]!;
      if (text.length > 0 && this.attrs[id]! & (TokenAttr.CONTROL | TokenAttr.UNKNOWN)) texts.push(text);
    }
    return texts;
  }

  /** Number of special-token texts the encoder recognizes (llama.cpp's "special tokens cache size"). */
  get specialTokenCount(): number {
    return this.specialCache.length;
  }

  /**
   * Diagnostic: whether BPE merges run on token ids (closed vocabulary: every byte symbol and
   * every merge result is a token) or on texts. Builds the merge tables.
   */
  get mergesOnIds(): boolean {
    return this.bpe().usesIdMerges;
  }

  isEog(id: number): boolean {
    return this.eogIds.has(id);
  }

  isControl(id: number): boolean {
    return (this.attrs[id]! & TokenAttr.CONTROL) !== 0;
  }

  /** Raw vocabulary text of a token (byte-level for normal tokens). */
  tokenText(id: number): string {
    this.checkId(id);
    return this.vocab.tokens[id]!;
  }

  /** Id of an exact vocabulary text, or undefined. */
  tokenId(text: string): number | undefined {
    return this.tokenToId().get(text);
  }

  /** Text -> token ids, as llama_tokenize(text, addSpecial, parseSpecial). */
  encode(text: string, options: EncodeOptions = {}): number[] {
    const job = this.encodeJob(text, options, { steps: 0, sliceEnd: Number.POSITIVE_INFINITY });
    for (;;) {
      const step = job.next();
      if (step.done) return step.value;
    }
  }

  /**
   * The same ids as `encode`, computed in slices of bounded work (`sliceSteps`) with the event loop
   * turning between them: the work is linear in the text (O(n log n) for one long word), and no
   * slice holds the thread for more than a few milliseconds whatever the text.
   */
  async encodeAsync(text: string, options: EncodeAsyncOptions = {}): Promise<number[]> {
    const slice = options.sliceSteps ?? TOKENIZER_SLICE_STEPS;
    if (!Number.isSafeInteger(slice) || slice < 1) {
      throw new TokenizerError("TOKENIZER_BAD_OPTION", `sliceSteps must be a positive integer, got ${slice}`, { field: "sliceSteps" });
    }
    const meter: WorkMeter = { steps: 0, sliceEnd: slice };
    const job = this.encodeJob(text, options, meter);
    for (;;) {
      options.signal?.throwIfAborted();
      const step = job.next();
      if (step.done) return step.value;
      options.onSlice?.(meter.steps);
      await new Promise<void>((resolve) => setImmediate(resolve));
      meter.sliceEnd = meter.steps + slice;
    }
  }

  /**
   * The most bytes of input one token can stand for, when that bounds the token count: every byte of
   * plain text lands in exactly one token when the vocabulary is closed (every byte symbol and merge
   * result a token), and a special token stands for its own text. Then a text of B UTF-8 bytes
   * (lone surrogates count as U+FFFD's 3) has at least ceil(B / maxTokenBytes) tokens, special
   * parsing or not. Undefined for a vocabulary that is not closed: there BPE drops bytes it cannot
   * spell, so no byte count bounds the tokens.
   */
  get maxTokenBytes(): number | undefined {
    if (this.maxTokenBytesValue === null) {
      let most: number | undefined;
      if (this.bpe().usesIdMerges) {
        most = 1;
        const special = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN;
        for (let id = 0; id < this.vocabSize; id++) {
          const text = this.vocab.tokens[id]!;
          // byte-level text: one character per byte; special tokens: their UTF-8 text
          const bytes = this.attrs[id]! & special ? utf8Length(text) : text.length;
          if (bytes > most) most = bytes;
        }
      }
      this.maxTokenBytesValue = most;
    }
    return this.maxTokenBytesValue;
  }

  private *encodeJob(text: string, options: EncodeOptions, meter: WorkMeter): Generator<void, number[], void> {
    const addSpecial = options.addSpecial ?? true;
    const parseSpecial = options.parseSpecial ?? false;
    const output: number[] = [];
    if (addSpecial && this.addBos && this.specials.bos !== undefined) output.push(this.specials.bos);
    const wellFormed = yield* wellFormedInSlices(text, meter);
    if (wellFormed.length > 0) {
      const map = options.mapPlainText;
      for (const fragment of yield* this.partition(wellFormed, parseSpecial, meter)) {
        if (typeof fragment === "number") output.push(fragment);
        else if (!map) yield* this.encodeRaw(fragment, output, meter);
        else {
          const mapped = yield* wellFormedInSlices(map(fragment), meter);
          for (const piece of yield* this.partition(mapped, false, meter)) {
            if (typeof piece === "number") output.push(piece);
            else yield* this.encodeRaw(piece, output, meter);
          }
        }
      }
    }
    if (addSpecial && this.addEos && this.specials.eos !== undefined) output.push(this.specials.eos);
    return output;
  }

  /** The bytes a token renders to (llama_token_to_piece, lstrip 0). */
  tokenToPiece(id: number, options: { special?: boolean } = {}): Uint8Array {
    this.checkId(id);
    const attr = this.attrs[id]!;
    const hidden = attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN);
    if (hidden && !options.special) return new Uint8Array(0);
    let piece = this.pieceCache.get(id);
    if (!piece) {
      piece = this.renderPiece(id, attr);
      this.pieceCache.set(id, piece);
    }
    return piece;
  }

  /** Ids -> text (llama_detokenize; invalid UTF-8 becomes U+FFFD). */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    return new TextDecoder("utf-8", { ignoreBOM: true }).decode(this.decodeBytes(ids, options));
  }

  /** Ids -> bytes (llama_detokenize). */
  decodeBytes(ids: readonly number[], options: DecodeOptions = {}): Uint8Array {
    const job = this.decodeJob(ids, options, Number.POSITIVE_INFINITY);
    for (;;) {
      const step = job.next();
      if (step.done) return step.value;
    }
  }

  /**
   * The same text as `decode`, rendered in slices of `sliceSteps` tokens (default TOKENIZER_SLICE_STEPS) with
   * the event loop turning between them, so that a million ids never stall other requests.
   */
  async decodeAsync(
    ids: readonly number[],
    options: DecodeOptions & Pick<EncodeAsyncOptions, "sliceSteps" | "signal"> = {},
  ): Promise<string> {
    const slice = options.sliceSteps ?? TOKENIZER_SLICE_STEPS;
    if (!Number.isSafeInteger(slice) || slice < 1) {
      throw new TokenizerError("TOKENIZER_BAD_OPTION", `sliceSteps must be a positive integer, got ${slice}`, { field: "sliceSteps" });
    }
    const job = this.decodeJob(ids, options, slice);
    for (;;) {
      options.signal?.throwIfAborted();
      const step = job.next();
      if (step.done) return new TextDecoder("utf-8", { ignoreBOM: true }).decode(step.value);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /** decodeBytes' work, yielding after every `slice` ids. */
  private *decodeJob(ids: readonly number[], options: DecodeOptions, slice: number): Generator<void, Uint8Array, void> {
    let begin = 0;
    let end = ids.length;
    let removeSpace = this.addSpacePrefix;
    if (options.removeSpecial && this.addBos && end > 0 && ids[0] === this.specials.bos) {
      removeSpace = false;
      begin = 1;
    }
    if (options.removeSpecial && this.addEos && end > begin && ids[end - 1] === this.specials.eos) end--;
    const pieces: Uint8Array[] = [];
    let total = 0;
    for (let i = begin, sliceEnd = begin + slice; i < end; i++) {
      if (i === sliceEnd) {
        yield;
        sliceEnd += slice;
      }
      let piece = this.tokenToPiece(ids[i]!, { special: options.special ?? false });
      if (removeSpace && piece.length > 0 && piece[0] === 0x20) piece = piece.subarray(1);
      removeSpace = false;
      pieces.push(piece);
      total += piece.length;
    }
    const out = new Uint8Array(total);
    let offset = 0;
    for (const piece of pieces) {
      out.set(piece, offset);
      offset += piece.length;
    }
    return out;
  }

  private renderPiece(id: number, attr: number): Uint8Array {
    const text = this.vocab.tokens[id]!;
    if (attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN | TokenAttr.USER_DEFINED)) return utf8Encoder.encode(text);
    if (attr & TokenAttr.NORMAL) {
      // Byte-level text -> bytes; characters outside the alphabet render as llama.cpp's marker.
      const bytes: number[] = [];
      for (const ch of text) {
        const byte = byteOfCodePoint(ch.codePointAt(0)!);
        if (byte >= 0) {
          bytes.push(byte);
          continue;
        }
        const utf8 = utf8Encoder.encode(ch);
        const hex = Array.from(utf8, (b) => b.toString(16).padStart(2, "0")).join("");
        for (const b of utf8Encoder.encode(`[UNK_BYTE_0x${hex}${text}]`)) bytes.push(b);
      }
      return Uint8Array.from(bytes);
    }
    if (attr & TokenAttr.BYTE) {
      // "<0xAB>" byte tokens
      const value = Number.parseInt(text.slice(3, 5), 16);
      return Number.isNaN(value) ? new Uint8Array(0) : Uint8Array.of(value);
    }
    return new Uint8Array(0);
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new TokenizerError("TOKENIZER_BAD_TOKEN_ID", `token id ${id} is outside [0, ${this.vocabSize})`);
    }
  }

  private tokenToId(): Map<string, number> {
    if (!this.tokenToIdMap) {
      const map = new Map<string, number>();
      const tokens = this.vocab.tokens;
      for (let id = 0; id < tokens.length; id++) {
        let text = tokens[id]!;
        if (text.length === 0) text = `[EMPTY_${id}]`;
        const previous = map.get(text);
        if (previous !== undefined) {
          throw new TokenizerError(
            "TOKENIZER_DUPLICATE_TOKEN",
            `duplicate token in vocabulary: ${JSON.stringify(text)} has ids ${previous} and ${id}`,
            { field: "tokenizer.ggml.tokens" },
          );
        }
        map.set(text, id);
      }
      this.tokenToIdMap = map;
    }
    return this.tokenToIdMap;
  }

  /** Built on first encode: 250k merges take a few hundred milliseconds. */
  private bpe(): BpeModel {
    this.bpeModel ??= new BpeModel(this.tokenToId(), this.vocab.merges, this.vocabSize);
    return this.bpeModel;
  }

  /**
   * Splits text into raw fragments and special-token ids. Like llama.cpp, each special token in
   * cache order (longest first) splits every remaining raw fragment at its occurrences.
   */
  private *partition(text: string, parseSpecial: boolean, meter: WorkMeter): Generator<void, (string | number)[], void> {
    let fragments: (string | number)[] = [text];
    for (const id of this.specialCache) {
      const attr = this.attrs[id]!;
      if (!parseSpecial && attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN)) continue;
      const tokenText = this.vocab.tokens[id]!;
      if (tokenText.length === 0) continue;
      let changed = false;
      const next: (string | number)[] = [];
      for (const fragment of fragments) {
        if (typeof fragment === "number") {
          next.push(fragment);
          continue;
        }
        let start = 0;
        for (;;) {
          const at = yield* findInSlices(fragment, tokenText, start, meter);
          if (at < 0) break;
          if (at > start) next.push(fragment.slice(start, at));
          next.push(id);
          start = at + tokenText.length;
          if (meter.steps >= meter.sliceEnd) yield;
        }
        if (start === 0) next.push(fragment);
        else {
          changed = true;
          if (start < fragment.length) next.push(fragment.slice(start));
        }
      }
      if (changed) fragments = next;
    }
    return fragments;
  }

  private *encodeRaw(text: string, output: number[], meter: WorkMeter): Generator<void, void, void> {
    const bpe = this.bpe();
    const scanner = new PreTokenizerScanner(text, this.pre);
    let start = 0;
    for (;;) {
      const before = scanner.steps;
      const end = scanner.next(Math.max(1, meter.sliceEnd - meter.steps));
      meter.steps += scanner.steps - before;
      if (end === -1) return;
      if (end === -2) {
        yield;
        continue;
      }
      const piece = text.slice(start, end);
      start = end;
      if (bpe.appendCached(piece, output)) {
        meter.steps++;
        if (meter.steps >= meter.sliceEnd) yield;
        continue;
      }
      const word = bpe.beginWord(piece);
      for (;;) {
        const done = word.steps;
        const finished = word.run(output, Math.max(1, meter.sliceEnd - meter.steps));
        meter.steps += word.steps - done;
        if (finished) break;
        yield;
      }
      if (meter.steps >= meter.sliceEnd) yield;
    }
  }
}

/** UTF-16 units one search for a special-token text covers at a time in an encode's slices. */
const FIND_WINDOW = 1 << 16;

/** text.indexOf(needle, from), a window at a time (each window's units are steps). */
function* findInSlices(text: string, needle: string, from: number, meter: WorkMeter): Generator<void, number, void> {
  for (let start = from; start < text.length; start += FIND_WINDOW) {
    const end = Math.min(text.length, start + FIND_WINDOW + needle.length - 1);
    const at = text.slice(start, end).indexOf(needle);
    // the units the search went through: up to the match, or the whole window
    meter.steps += at >= 0 ? at + needle.length : end - start;
    if (at >= 0) return start + at;
    if (meter.steps >= meter.sliceEnd) yield;
  }
  return -1;
}

/** UTF-16 units `toWellFormed` takes at a time in an encode's slices. */
const WELL_FORMED_CHUNK = 1 << 16;

/** toWellFormed(text), a chunk at a time (never cutting a surrogate pair), counting each unit a step. */
function* wellFormedInSlices(text: string, meter: WorkMeter): Generator<void, string, void> {
  if (text.length <= WELL_FORMED_CHUNK) {
    meter.steps += text.length;
    return toWellFormed(text);
  }
  let out = "";
  for (let from = 0; from < text.length; ) {
    let to = Math.min(text.length, from + WELL_FORMED_CHUNK);
    const last = text.charCodeAt(to - 1);
    if (to < text.length && last >= 0xd800 && last <= 0xdbff) to++;
    out += toWellFormed(text.slice(from, to));
    meter.steps += to - from;
    from = to;
    if (meter.steps >= meter.sliceEnd) yield;
  }
  return out;
}

/** text -> lowest id, for the given texts only. */
function findTexts(tokens: readonly string[], texts: readonly string[]): Map<string, number> {
  const wanted = new Set(texts);
  const found = new Map<string, number>();
  for (let id = 0; id < tokens.length; id++) {
    const text = tokens[id]!;
    if (wanted.has(text) && !found.has(text)) found.set(text, id);
  }
  return found;
}
