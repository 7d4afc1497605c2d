/**
 * The training text: the fortune cookie files of Debian's `fortunes` and `fortunes-min` packages
 * (/usr/share/games/fortunes), one document per fortune (files are split on lines holding "%").
 * Terminal overstrike sequences (char, backspace) are removed. Every file is recorded with its
 * sha256 and the package (name, version) that installed it.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { mulberry32 } from "@keepquant/quant/testing";
import type { Recipe } from "./recipe.js";

export interface CorpusFile {
  file: string;
  package: string;
  sha256: string;
  bytes: number;
  documents: number;
}

export interface CorpusPackage {
  name: string;
  version: string;
  /** sha256 of /usr/share/doc/<name>/copyright (the licence text the package ships). */
  copyrightSha256: string;
}

export interface Corpus {
  packages: CorpusPackage[];
  files: CorpusFile[];
  /** sha256 over "sha256  file\n" lines of every file, in order. */
  sha256: string;
  /** All fortunes, file by file in name order. */
  documents: string[];
}

export class CorpusError extends Error {
  override name = "CorpusError";
}

function dpkgVersion(name: string): string {
  try {
    return execFileSync("dpkg-query", ["-W", "-f", "${Version}", name], { encoding: "utf8" }).trim();
  } catch {
    throw new CorpusError(`Debian package ${name} is not installed: run 'apt-get install -y ${name}'`);
  }
}

function owner(file: string): string {
  return execFileSync("dpkg", ["-S", file], { encoding: "utf8" }).split(":")[0]!.trim();
}

/** One fortune file's documents: split on "%" lines, overstrike removed, trailing blanks trimmed. */
export function splitFortunes(text: string): string[] {
  return (
    text
      .replace(/\r/g, "")
      // biome-ignore lint/suspicious/noControlCharactersInRegex: fortune files overstrike with backspace; drop the struck character
      .replace(/[^\n]\x08/g, "")
      .split(/^%$/m)
      .map((doc) => doc.replace(/^\n+/, "").replace(/\s+$/, ""))
      .filter((doc) => doc.length > 0)
  );
}

export function readCorpus(recipe: Recipe): Corpus {
  const { directory, exclude, packages: packageNames } = recipe.corpus;
  if (!fs.existsSync(directory)) throw new CorpusError(`${directory} not found: run 'apt-get install -y ${packageNames.join(" ")}'`);
  const packages = packageNames.map((name) => {
    const copyright = `/usr/share/doc/${name}/copyright`;
    return {
      name,
      version: dpkgVersion(name),
      copyrightSha256: createHash("sha256").update(fs.readFileSync(copyright)).digest("hex"),
    };
  });
  const names = fs
    .readdirSync(directory)
    .filter((f) => !f.includes(".") && !exclude.includes(f))
    .filter((f) => fs.lstatSync(path.join(directory, f)).isFile())
    .sort();
  const files: CorpusFile[] = [];
  const documents: string[] = [];
  for (const name of names) {
    const full = path.join(directory, name);
    const bytes = fs.readFileSync(full);
    const pkg = owner(full);
    if (!packageNames.includes(pkg)) throw new CorpusError(`${full} belongs to package ${pkg}, not one of ${packageNames.join(", ")}`);
    const docs = splitFortunes(new TextDecoder("utf-8").decode(bytes));
    documents.push(...docs);
    files.push({
      file: full,
      package: pkg,
      sha256: createHash("sha256").update(bytes).digest("hex"),
      bytes: bytes.length,
      documents: docs.length,
    });
  }
  const sha256 = createHash("sha256")
    .update(files.map((f) => `${f.sha256}  ${f.file}\n`).join(""))
    .digest("hex");
  return { packages, files, sha256, documents };
}

export interface Split {
  train: string[];
  validation: string[];
}

/** Fisher-Yates with the recipe's seed; the first `validationFraction` of the shuffle is held out. */
export function splitDocuments(documents: readonly string[], recipe: Recipe): Split {
  const random = mulberry32(recipe.seed);
  const order = documents.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const held = Math.round(documents.length * recipe.corpus.validationFraction);
  return { validation: order.slice(0, held).map((i) => documents[i]!), train: order.slice(held).map((i) => documents[i]!) };
}

/** A training document as text: the fortune, or (chatFraction of them) a ChatML exchange answering with it. */
export function trainingTexts(train: readonly string[], recipe: Recipe): string[] {
  const random = mulberry32(recipe.seed + 1);
  const prompts = recipe.corpus.chatPrompts;
  return train.map((doc) => {
    if (random() >= recipe.corpus.chatFraction) return `${doc}\n`;
    const prompt = prompts[Math.floor(random() * prompts.length)]!;
    return `<|im_start|>user\n${prompt}<|im_end|>\n<|im_start|>assistant\n${doc}<|im_end|>\n`;
  });
}
