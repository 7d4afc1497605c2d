/** A GGUF byte-level BPE tokenizer description for synthetic files. */
export interface Qwen35TokenizerSpec {
  /** `tokenizer.ggml.model` (default "gpt2"). */
  model?: string;
  /** `tokenizer.ggml.pre` (default "qwen35"). */
  pre?: string;
  tokens: string[];
  /** `tokenizer.ggml.token_type` per token (1 normal, 3 control, ...); default all 1. */
  tokenTypes?: number[];
  merges?: string[];
  bosId?: number;
  eosId?: number;
  eotId?: number;
  padId?: number;
  addBosToken?: boolean;
  chatTemplate?: string;
}

export const TOKEN_TYPE_NORMAL = 1;
export const TOKEN_TYPE_CONTROL = 3;

/** GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest to U+0100.. in order. */
export function gpt2ByteSymbols(): string[] {
  const symbols: string[] = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    symbols[b] = String.fromCodePoint(printable ? b : next++);
  }
  return symbols;
}

/** A ChatML template (the shape Qwen uses), rendered by the engine with @huggingface/jinja. */
export const DEFAULT_CHAT_TEMPLATE =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

const DEFAULT_MERGES = ["Ġ t", "h e", "i n", "e r", "Ġ a", "o n", "Ġt he", "Ġ s", "r e", "a t"];
export const DEFAULT_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] as const;

/**
 * The default synthetic tokenizer: 256 GPT-2 byte symbols, a handful of merges (their results are
 * tokens), the specials `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (control), then unique
 * filler tokens up to `vocab`.
 */
export function defaultQwen35Tokenizer(vocab: number): Qwen35TokenizerSpec {
  const tokens = gpt2ByteSymbols();
  const merges = [...DEFAULT_MERGES];
  for (const merge of merges) tokens.push(merge.replace(" ", ""));
  const specialStart = tokens.length;
  tokens.push(...DEFAULT_SPECIAL_TOKENS);
  if (vocab < tokens.length) throw new RangeError(`vocab ${vocab} is smaller than the ${tokens.length} tokens of the default tokenizer`);
  const tokenTypes = new Array<number>(vocab).fill(TOKEN_TYPE_NORMAL);
  for (let i = 0; i < DEFAULT_SPECIAL_TOKENS.length; i++) tokenTypes[specialStart + i] = TOKEN_TYPE_CONTROL;
  for (let i = tokens.length; i < vocab; i++) tokens.push(`<filler_${i}>`);
  return {
    model: "gpt2",
    pre: "qwen35",
    tokens,
    tokenTypes,
    merges,
    bosId: specialStart,
    eosId: specialStart + 2,
    eotId: specialStart + 2,
    padId: specialStart,
    addBosToken: false,
    chatTemplate: DEFAULT_CHAT_TEMPLATE,
  };
}
