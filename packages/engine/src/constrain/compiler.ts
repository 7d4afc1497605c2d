/**
 * Compiles constraints for one tokenizer: the grammar engine's view of the vocabulary is built once
 * (on the first constrained request), compiled grammars are cached by their source, and each
 * constrained sequence gets its own matcher.
 */
import { BYTE_TO_CHAR } from "../tokenizer/byte-unicode.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import { TokenAttr } from "../tokenizer/vocab.js";
import { ConstraintError } from "./errors.js";
import type { GrammarSource } from "./spec.js";
import { guarded, loadXgrammar, type XgCompiledGrammar, type XgGrammarMatcher } from "./xgrammar.js";

/**
 * JSON is generated in one canonical layout: one line, `", "` and `": "` as separators, no other
 * whitespace (xgrammar's `any_whitespace = false, indent = -1`). Free whitespace would let a model
 * fill its whole budget with blanks between tokens; a fixed layout is also what a parser of the
 * output expects.
 */
const JSON_ANY_WHITESPACE = false;
const JSON_ONE_LINE = -1;
/** xgrammar's character class of a length-bounded string, and JSON's unescaped string character. */
const BOUNDED_STRING_CHAR = String.raw`[^"\\\r\n]`;
const JSON_STRING_CHAR = String.raw`[^\0-\x1f"\\]`;

/** Compiled grammars kept for reuse (a server sees the same schema again and again). */
export const COMPILED_GRAMMAR_CACHE_ENTRIES = 32;

const utf8 = new TextEncoder();

/**
 * The vocabulary as xgrammar's `byte_level` type reads it: each token's bytes in the byte-level
 * alphabet. Tokens that render to nothing in text (CONTROL, UNKNOWN, UNUSED) are empty strings,
 * which the grammar engine treats as special (never allowed, except the stop tokens at the end).
 */
export function grammarVocab(tokenizer: Tokenizer): string[] {
  const out = new Array<string>(tokenizer.vocabSize);
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    const attr = tokenizer.attrs[id]!;
    const text = tokenizer.tokenText(id);
    if (attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN | TokenAttr.UNUSED)) out[id] = "";
    else if (attr & TokenAttr.NORMAL) out[id] = text;
    else if (attr & TokenAttr.BYTE) {
      const value = Number.parseInt(text.slice(3, 5), 16);
      out[id] = Number.isNaN(value) ? "" : BYTE_TO_CHAR[value]!;
    } else {
      // USER_DEFINED (rendered as their text): the text's bytes in the byte-level alphabet
      out[id] = Array.from(utf8.encode(text), (b) => BYTE_TO_CHAR[b]!).join("");
    }
  }
  return out;
}

interface CacheEntry {
  readonly compiled: Promise<XgCompiledGrammar>;
  users: number;
}

export class ConstraintCompiler {
  private compiler: ReturnType<typeof this.createCompiler> | undefined;
  private readonly cache = new Map<string, CacheEntry>();

  constructor(private readonly tokenizer: Tokenizer) {}

  private async createCompiler() {
    const xg = await loadXgrammar();
    const stop = [...this.tokenizer.eogIds];
    const info = await xg.TokenizerInfo.createTokenizerInfo(
      grammarVocab(this.tokenizer),
      "byte_level",
      false,
      this.tokenizer.vocabSize,
      stop,
    );
    return { xg, compiler: await xg.GrammarCompiler.createGrammarCompiler(info) };
  }

  private ready() {
    this.compiler ??= this.createCompiler();
    this.compiler.catch(() => {
      this.compiler = undefined;
    });
    return this.compiler;
  }

  /** Compiles `source` (cached); `field` names the request parameter in errors. */
  private compile(source: GrammarSource, field: string): CacheEntry {
    const key = JSON.stringify(source);
    const hit = this.cache.get(key);
    if (hit) {
      // most recently used last
      this.cache.delete(key);
      this.cache.set(key, hit);
      return hit;
    }
    const compiled = (async () => {
      const { compiler } = await this.ready();
      switch (source.kind) {
        case "json_schema":
          return guarded(
            async () => compiler.compileGrammar(await this.jsonSchemaGrammar(source.schema, source.strictMode), "root"),
            "CONSTRAINT_BAD_SCHEMA",
            `${field}.schema`,
            "the JSON Schema",
          );
        case "ebnf":
          return guarded(() => compiler.compileGrammar(source.ebnf, "root"), "CONSTRAINT_BAD_GRAMMAR", `${field}.ebnf`, "the grammar");
        case "structural_tag":
          return guarded(
            async () => compiler.compileStructuralTag(await this.withJsonGrammars(source.tag)),
            "CONSTRAINT_BAD_SCHEMA",
            `${field}.tools`,
            "the tool schemas",
          );
      }
    })();
    const entry: CacheEntry = { compiled, users: 0 };
    this.cache.set(key, entry);
    // a failed compile is not kept
    compiled.catch(() => {
      if (this.cache.get(key) === entry) this.cache.delete(key);
    });
    this.evict();
    return entry;
  }

  /**
   * The EBNF grammar of a JSON Schema in the canonical layout. xgrammar 0.1.27 writes the characters
   * of a length-bounded string (minLength / maxLength) as `[^"\\\r\n]`, which admits raw control
   * characters (a tab) that JSON forbids inside strings: they are narrowed to JSON's string
   * characters here, so that every output parses.
   */
  private async jsonSchemaGrammar(schema: string, strictMode: boolean): Promise<string> {
    const { xg } = await this.ready();
    const ebnf = await xg.Testings._jsonSchemaToEBNF(schema, JSON_ANY_WHITESPACE, JSON_ONE_LINE, undefined, strictMode);
    return ebnf.split(BOUNDED_STRING_CHAR).join(JSON_STRING_CHAR);
  }

  /**
   * A structural tag whose `json_schema` contents are replaced by their grammars in the canonical
   * JSON layout (a structural tag's own JSON contents allow any whitespace).
   */
  private async withJsonGrammars(tag: Record<string, unknown>): Promise<Record<string, unknown>> {
    const convert = async (node: unknown): Promise<unknown> => {
      if (Array.isArray(node)) return Promise.all(node.map(convert));
      if (typeof node !== "object" || node === null) return node;
      const record = node as Record<string, unknown>;
      if (record["type"] === "qwen_xml_parameter") return record;
      if (record["type"] === "json_schema") {
        return { type: "grammar", grammar: await this.jsonSchemaGrammar(JSON.stringify(record["json_schema"]), true) };
      }
      const out: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(record)) out[key] = await convert(value);
      return out;
    };
    return (await convert(tag)) as Record<string, unknown>;
  }

  /** Drops the least recently used compiled grammars no matcher uses, past the cache size. */
  private evict(): void {
    for (const [key, entry] of this.cache) {
      if (this.cache.size <= COMPILED_GRAMMAR_CACHE_ENTRIES) return;
      if (entry.users > 0) continue;
      this.cache.delete(key);
      entry.compiled.then((grammar) => grammar.dispose()).catch(() => undefined);
    }
  }

  /** Compiles `source` and checks it compiles (the grammar engine's errors as ConstraintError). */
  async check(source: GrammarSource, field: string): Promise<void> {
    await this.compile(source, field).compiled;
  }

  /** A fresh matcher of `source`; `release` gives it back (call it once). */
  async matcher(source: GrammarSource, field: string): Promise<{ matcher: XgGrammarMatcher; release: () => void }> {
    const entry = this.compile(source, field);
    entry.users++;
    try {
      const grammar = await entry.compiled;
      const { xg } = await this.ready();
      const matcher = await xg.GrammarMatcher.createGrammarMatcher(grammar);
      let released = false;
      return {
        matcher,
        release: () => {
          if (released) return;
          released = true;
          matcher.dispose();
          entry.users--;
          this.evict();
        },
      };
    } catch (error) {
      entry.users--;
      if (ConstraintError.isInstance(error)) throw error;
      throw new ConstraintError("CONSTRAINT_ENGINE_UNAVAILABLE", `the grammar engine failed: ${(error as Error).message}`, {
        field,
        cause: error,
      });
    }
  }
}
