/**
 * Deterministic tokenizer test strings: corpus lines, code, whitespace runs, digits, Unicode of
 * many scripts (combining marks, CJK, emoji sequences), special-token texts and near misses.
 */
import { createRng, type Rng } from "@keepquant/engine";

const pick = <T>(rng: Rng, items: readonly T[]): T => items[rng.nextInt(items.length)]!;

const WORDS = [
  "the",
  "The",
  "tokenizer",
  "hello",
  "world",
  "don't",
  "DON'T",
  "we're",
  "I'LL",
  "she'd",
  "it's",
  "you've",
  "I'm",
  "model",
  "llama",
  "GGUF",
  "quantize",
  "Qwen3.5",
  "naïve",
  "café",
  "über",
  "Straße",
  "façade",
  "résumé",
];
const SCRIPTS = [
  "日本語のテキスト",
  "中文分词测试",
  "한국어 문장입니다",
  "Ελληνικά κείμενα",
  "Русский текст",
  "עברית",
  "العربية",
  "हिन्दी भाषा",
  "ภาษาไทย",
  "ქართული",
  "Հայերեն",
  "தமிழ்",
  "বাংলা",
  "ᚠᚢᚦᚨᚱᚲ",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
  "𐌰𐌱𐌲",
];
const MARKS = ["e\u0301", "a\u0308\u0304", "n\u0303", "\u0301", "o\u0328\u0301", "\u093f", "\u0e31", "\u20dd", "x\u0336y\u0336"];
const EMOJI = ["🎉", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🏳️‍🌈", "❤️", "✋🏿", "🧑‍💻", "😀😃😄", "🫠", "#️⃣", "©️", "☕"];
const DIGITS = ["0", "42", "3.14159", "1,000,000", "٣٤٥", "１２３", "²³", "½", "Ⅻ", "①②", "0x1F", "1e-9", "۱۲", "𝟙𝟚"];
const SPACES = [
  " ",
  "  ",
  "   ",
  "    ",
  "\t",
  "\t\t",
  "\n",
  "\n\n",
  "\r\n",
  "\r",
  " \n ",
  "\u00a0",
  "\u3000",
  "\u2009",
  "\u0085",
  "\u2028",
  "\u2029",
  "\ufeff",
  "\u200b",
  "\u000b",
  "\u000c",
  "\u001c",
  " \t\n",
  "\n    ",
];
const PUNCT = [
  "!",
  "?",
  ".",
  ",",
  "...",
  "—",
  "–",
  "«",
  "»",
  "“",
  "”",
  "'",
  '"',
  "(",
  ")",
  "[]",
  "{}",
  "<>",
  "::",
  "->",
  "=>",
  "&&",
  "||",
  "$",
  "€",
  "£",
  "¥",
  "©",
  "®",
  "™",
  "°",
  "±",
  "∑",
  "√",
  "∞",
  "§",
  "¶",
  "•",
  "…",
  "@",
  "#",
  "%",
  "^",
  "~",
  "`",
  "|",
  "\\",
  "/",
  "*",
  "+",
  "=",
  "_",
  "-",
];
const SPECIAL = [
  "<|im_start|>",
  "<|im_end|>",
  "<|endoftext|>",
  "<think>",
  "</think>",
  "<tool_call>",
  "</tool_call>",
  "<tool_response>",
  "</tool_response>",
  "<|fim_prefix|>",
  "<|fim_middle|>",
  "<|fim_suffix|>",
  "<|fim_pad|>",
  "<|repo_name|>",
  "<|file_sep|>",
  "<|vision_pad|>",
  "<|vision_start|>",
  "<|box_start|>",
  "<|im_start",
  "im_end|>",
  "<|im_start|",
  "<think",
  "</think",
  "<|<|im_end|>|>",
  "<<think>>",
  "<|IM_END|>",
];
const CODE = [
  "function add(a, b) {\n  return a + b;\n}\n",
  "def main():\n    print(\"hi\")\n\nif __name__ == '__main__':\n    main()\n",
  "const x = { a: 1, b: [2, 3] };",
  "for (let i = 0; i < n; i++) sum += v[i] * w[i];",
  "#include <stdio.h>\nint main(void) { return 0; }",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  '<div class="x">&nbsp;</div>',
  "https://example.com/path?q=1&r=two#frag",
  'git commit -m "fix: it\'s done"',
  "    indented\n\tmixed\t tabs  \n",
  "λx. x + 1 // 注释",
  "a_b-c.d/e\\f",
  "$ pnpm exec tsx scripts/x.ts --flag=1",
];
const CONTROL = [
  "\u0000",
  "\u0001",
  "\u0007",
  "\u007f",
  "\u0080",
  "\u009f",
  "\ue000",
  "\uf8ff",
  "\u{10fffd}",
  "\ufffd",
  "\u00ad",
  "\u200d",
  "\u2060",
  "\ud800",
  "\udfff",
];

function randomUnicode(rng: Rng): string {
  // A code point from a few planes, skipping surrogates.
  const ranges: [number, number][] = [
    [0x80, 0x7ff],
    [0x800, 0xd7ff],
    [0xe000, 0xfffd],
    [0x10000, 0x1ffff],
    [0x20000, 0x2a6df],
    [0x1f300, 0x1faff],
  ];
  const [lo, hi] = pick(rng, ranges);
  return String.fromCodePoint(lo + rng.nextInt(hi - lo + 1));
}

function fragment(rng: Rng): string {
  switch (rng.nextInt(12)) {
    case 0:
    case 1:
      return pick(rng, WORDS);
    case 2:
      return pick(rng, SCRIPTS);
    case 3:
      return pick(rng, MARKS);
    case 4:
      return pick(rng, EMOJI);
    case 5:
      return pick(rng, DIGITS);
    case 6:
      return pick(rng, SPACES);
    case 7:
      return pick(rng, PUNCT);
    case 8:
      return pick(rng, SPECIAL);
    case 9:
      return pick(rng, CODE);
    case 10:
      return pick(rng, CONTROL);
    default:
      return randomUnicode(rng);
  }
}

/** `count` strings: hand-picked edge cases, then corpus lines and random compositions. */
export function tokenizerTestStrings(count: number, corpusLines: readonly string[], seed = 20261129): string[] {
  const rng = createRng(seed);
  const out: string[] = [
    "",
    " ",
    "  ",
    "\n",
    "a",
    "Hello world",
    "Hello  world",
    "Hello   world ",
    " leading",
    "trailing ",
    "x\n\n\ny",
    "'s",
    "'S",
    "it's",
    "IT'S",
    "'re'RE'll'LL'd'D'm'M't'T've'VE",
    "''",
    "a'b",
    "word's  next",
    "1234567890",
    "12 345",
    "3.14",
    "\r\n\r\n",
    "  \n  \n",
    "\t\t\tindent",
    "a\u00a0b",
    "a\u0085b",
    "a\ufeffb",
    "a\u3000b",
    "e\u0301\u0301\u0301",
    "\u0301start",
    " \u0301",
    "1\u0301",
    "!\u0301",
    "日本\u3099",
    "👨‍👩‍👧",
    "<|im_start|>",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<think>\n\n</think>\n\n",
    "<|im_start|><|im_end|>",
    '<tool_call>\n{"name": "f"}\n</tool_call>',
    "x<|endoftext|>y",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    ...SPACES,
    ...PUNCT,
    ...DIGITS,
    ...EMOJI,
    ...MARKS,
    ...SCRIPTS,
    ...SPECIAL,
    ...CODE,
    ...CONTROL,
  ];
  while (out.length < count) {
    const kind = rng.nextInt(4);
    if (kind === 0 && corpusLines.length > 0) {
      // 1-3 consecutive corpus lines
      const start = rng.nextInt(corpusLines.length);
      out.push(corpusLines.slice(start, start + 1 + rng.nextInt(3)).join("\n"));
    } else {
      const parts = 1 + rng.nextInt(kind === 1 ? 3 : 10);
      let text = "";
      for (let i = 0; i < parts; i++) text += fragment(rng);
      out.push(text);
    }
  }
  return out.slice(0, count);
}
