/**
 * Compiles constraints for one tokenizer. The grammar engine runs on its own worker thread (one per
 * ConstraintCompiler, started by the first constrained request): its view of the vocabulary is built
 * there once, compiled grammars are cached there by their source, and each constrained sequence gets
 * a matcher there, mirrored on this thread by a RemoteMatcher. A worker that dies fails the requests
 * waiting on it (CONSTRAINT_ENGINE_UNAVAILABLE); the next request starts a new one.
 */
import { BYTE_TO_CHAR } from "../tokenizer/byte-unicode.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import { TokenAttr } from "../tokenizer/vocab.js";
import { ConstraintError } from "./errors.js";
import { GrammarThread } from "./grammar-thread.js";
import { RemoteMatcher } from "./remote-matcher.js";
import type { GrammarSource } from "./spec.js";
import { xgrammarFile } from "./xgrammar.js";

/** Compiled grammars kept for reuse (a server sees the same schema again and again). */
export const COMPILED_GRAMMAR_CACHE_ENTRIES = 32;

const utf8 = new TextEncoder();

/**
 * The vocabulary as xgrammar's `byte_level` type reads it: each token's bytes in the byte-level
 * alphabet. Tokens that render to nothing in text (CONTROL, UNKNOWN, UNUSED) are empty strings,
 * which the grammar engine treats as special (never allowed, except the stop tokens at the end).
 * Tokens `first` .. `end - 1` (the whole vocabulary by default).
 */
export function grammarVocab(tokenizer: Tokenizer, first = 0, end = tokenizer.vocabSize): string[] {
  const out = new Array<string>(Math.max(0, Math.min(end, tokenizer.vocabSize) - first));
  for (let i = 0; i < out.length; i++) {
    const id = first + i;
    const attr = tokenizer.attrs[id]!;
    const text = tokenizer.tokenText(id);
    if (attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN | TokenAttr.UNUSED)) out[i] = "";
    else if (attr & TokenAttr.NORMAL) out[i] = text;
    else if (attr & TokenAttr.BYTE) {
      const value = Number.parseInt(text.slice(3, 5), 16);
      out[i] = Number.isNaN(value) ? "" : BYTE_TO_CHAR[value]!;
    } else {
      // USER_DEFINED (rendered as their text): the text's bytes in the byte-level alphabet
      out[i] = Array.from(utf8.encode(text), (b) => BYTE_TO_CHAR[b]!).join("");
    }
  }
  return out;
}

/** Tokens whose byte-level text is built between two yields to the event loop (about 5 ms of work). */
const VOCAB_TOKENS_PER_SLICE = 16_384;

export class ConstraintCompiler {
  private thread: GrammarThread | undefined;
  private vocab: Promise<{ text: string; lengths: Uint32Array }> | undefined;
  private nextMatcher = 0;
  private readonly stopTokens: ReadonlySet<number>;

  constructor(private readonly tokenizer: Tokenizer) {
    this.stopTokens = new Set(tokenizer.eogIds);
  }

  /** The vocabulary as the worker receives it: one string and each token's length (built in slices). */
  private workerVocab(): Promise<{ text: string; lengths: Uint32Array }> {
    this.vocab ??= (async () => {
      const parts: string[] = [];
      const lengths = new Uint32Array(this.tokenizer.vocabSize);
      for (let first = 0; first < this.tokenizer.vocabSize; first += VOCAB_TOKENS_PER_SLICE) {
        const slice = grammarVocab(this.tokenizer, first, first + VOCAB_TOKENS_PER_SLICE);
        slice.forEach((text, i) => {
          lengths[first + i] = text.length;
        });
        parts.push(slice.join(""));
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      return { text: parts.join(""), lengths };
    })();
    return this.vocab;
  }

  /** The live worker (a new one after a death). */
  private async worker(): Promise<GrammarThread> {
    if (this.thread && !this.thread.dead) return this.thread;
    const xgrammar = xgrammarFile();
    const vocab = await this.workerVocab();
    if (this.thread && !this.thread.dead) return this.thread;
    const thread = new GrammarThread({
      xgrammarFile: xgrammar,
      vocabText: vocab.text,
      vocabLengths: vocab.lengths,
      vocabSize: this.tokenizer.vocabSize,
      stopTokenIds: [...this.stopTokens],
      cacheEntries: COMPILED_GRAMMAR_CACHE_ENTRIES,
    });
    thread.onDeath(() => {
      if (this.thread === thread) this.thread = undefined;
    });
    this.thread = thread;
    return thread;
  }

  /** Compiles `source` and checks it compiles (the grammar engine's errors as ConstraintError). */
  async check(source: GrammarSource, field: string): Promise<void> {
    const thread = await this.worker();
    await thread.request({ op: "compile", key: JSON.stringify(source), source, field });
  }

  /** A fresh matcher of `source` (compiled, cached); `release` gives it back (call it once). */
  async matcher(source: GrammarSource, field: string): Promise<{ matcher: RemoteMatcher; release: () => void }> {
    const thread = await this.worker();
    const id = this.nextMatcher++;
    let reply: Awaited<ReturnType<GrammarThread["request"]>>;
    try {
      reply = await thread.request({ op: "create", matcher: id, key: JSON.stringify(source), source, field });
    } catch (error) {
      if (ConstraintError.isInstance(error)) throw error;
      throw new ConstraintError("CONSTRAINT_ENGINE_UNAVAILABLE", `the grammar engine failed: ${(error as Error).message}`, {
        field,
        cause: error,
      });
    }
    const matcher = new RemoteMatcher(thread, id, reply.masks[0]!, this.stopTokens);
    return { matcher, release: () => matcher.dispose() };
  }

  /** Ends the grammar worker (requests waiting on it fail); the next request starts a new one. */
  async dispose(): Promise<void> {
    const thread = this.thread;
    this.thread = undefined;
    await thread?.terminate();
  }

  /** Tests: the live worker, if any. */
  get workerForTests(): GrammarThread | undefined {
    return this.thread;
  }
}
