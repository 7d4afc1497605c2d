/**
 * Sweeps code points U+0080..U+3FFFF and U+E0000..U+E0FFF through our tokenizer and llama.cpp's,
 * to find code points that the two Unicode tables class differently (JS / ICU vs llama.cpp's
 * unicode-data). Each code point c is probed as "a" c "b" c "!\n", which splits differently for
 * each class the qwen35 pattern distinguishes ({letter, mark}, number, whitespace, other).
 *
 *   pnpm exec tsx scripts/tokenizer/sweep-codepoints.ts [--out file.json]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Tokenizer, codePointClass, vocabFromJson } from "@keepquant/engine";
import { vocabOnlyGguf } from "@keepquant/engine/testing";
import { runOracle } from "@keepquant/oracle";
import { ROOT } from "./corpus.js";

const PER_STRING = 64;
const PER_JOB = 32_768;

const probe = (cp: number): string => {
  const c = String.fromCodePoint(cp);
  return `a${c}b${c}!\n`;
};

async function main(): Promise<void> {
  const vocab = vocabFromJson(JSON.parse(fs.readFileSync(path.join(ROOT, "goldens/tokenizer/vocab.json"), "utf8")));
  const tok = Tokenizer.fromVocab(vocab);
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-sweep-"));
  const model = path.join(folder, "vocab.gguf");
  fs.writeFileSync(model, vocabOnlyGguf(vocab));
  const codePoints: number[] = [];
  for (let cp = 0x80; cp <= 0x3ffff; cp++) if (cp < 0xd800 || cp > 0xdfff) codePoints.push(cp);
  for (let cp = 0xe0000; cp <= 0xe0fff; cp++) codePoints.push(cp);
  const differing: number[] = [];
  try {
    for (let start = 0; start < codePoints.length; start += PER_JOB) {
      const batch = codePoints.slice(start, start + PER_JOB);
      const groups: number[][] = [];
      for (let i = 0; i < batch.length; i += PER_STRING) groups.push(batch.slice(i, i + PER_STRING));
      const { tokens } = await runOracle({ kind: "tokenize", model, texts: groups.map((g) => g.map(probe).join("")) });
      const suspects: number[] = [];
      groups.forEach((group, i) => {
        const ours = tok.encode(group.map(probe).join(""), { parseSpecial: true, addSpecial: false });
        if (JSON.stringify(ours) !== JSON.stringify(tokens[i])) suspects.push(...group);
      });
      if (suspects.length > 0) {
        const single = await runOracle({ kind: "tokenize", model, texts: suspects.map(probe) });
        suspects.forEach((cp, i) => {
          const ours = tok.encode(probe(cp), { parseSpecial: true, addSpecial: false });
          if (JSON.stringify(ours) !== JSON.stringify(single.tokens[i])) differing.push(cp);
        });
      }
      process.stdout.write(`\r${Math.min(start + PER_JOB, codePoints.length)}/${codePoints.length} swept, ${differing.length} differ`);
    }
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
  process.stdout.write("\n");
  const classNames: Record<number, string> = {
    0xd0: "other",
    0xd1: "number",
    0xd2: "letter",
    0xd3: "punctuation",
    0xd4: "mark",
    0xd5: "symbol",
    0x0b: "whitespace",
  };
  const rows = differing.map((cp) => ({ cp: `U+${cp.toString(16).toUpperCase().padStart(4, "0")}`, ours: classNames[codePointClass(cp)] }));
  // Compress into ranges for the report.
  const ranges: string[] = [];
  for (let i = 0; i < differing.length; ) {
    let j = i;
    while (j + 1 < differing.length && differing[j + 1] === differing[j]! + 1 && rows[j + 1]!.ours === rows[i]!.ours) j++;
    ranges.push(`${rows[i]!.cp}${j > i ? `..${rows[j]!.cp}` : ""} (ours: ${rows[i]!.ours})`);
    i = j + 1;
  }
  console.log(`${codePoints.length} code points swept, ${differing.length} differ`);
  for (const range of ranges) console.log(`  ${range}`);
  const outIndex = process.argv.indexOf("--out");
  if (outIndex > 0)
    fs.writeFileSync(process.argv[outIndex + 1]!, `${JSON.stringify({ swept: codePoints.length, differing: rows, ranges }, null, 1)}\n`);
}

await main();
