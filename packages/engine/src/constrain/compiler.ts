/**
 * Compiles constraints for one tokenizer. The grammar engine runs on worker threads (at most
 * GrammarLimits.workers, started by constrained requests as needed): each builds its own view of the
 * vocabulary once and caches the grammars it compiled by their source, and each constrained sequence gets
 * a matcher on the worker that compiled its grammar (web-xgrammar cannot move a compiled grammar),
 * mirrored on this thread by a RemoteMatcher. A new grammar compiles on a worker where no sequence's
 * matcher lives when there is one, so that running sequences keep getting their masks meanwhile.
 *
 * A worker that dies fails the requests waiting on it (CONSTRAINT_ENGINE_UNAVAILABLE); the next request
 * starts a new one. A worker ended for one request's grammar (past its compile time or memory budget:
 * that request fails with CONSTRAINT_TOO_COMPLEX) is replaced: the compiles queued on it are retried on
 * another worker and the matchers that lived on it are recreated there, so their sequences go on.
 */
import { BYTE_TO_CHAR } from "../tokenizer/byte-unicode.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import { TokenAttr } from "../tokenizer/vocab.js";
import { ConstraintError } from "./errors.js";
import {
  type GrammarThreadEnd,
  type GrammarThreadReply,
  type GrammarThreadRequest,
  GrammarThread,
  GrammarWorkerRestart,
} from "./grammar-thread.js";
import { DEFAULT_GRAMMAR_LIMITS, type GrammarLimits } from "./limits.js";
import { NUMBER_DIGITS } from "./integer-ranges.js";
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

/**
 * Times a request is sent again after its worker was ended for another request (each time, that other
 * request was past a bound: a request is not retried forever behind a stream of them).
 */
const MAX_RESTART_RETRIES = 4;

/** A matcher in use, and what recreates it on another worker. */
interface LiveMatcher {
  matcher: RemoteMatcher;
  key: string;
  source: GrammarSource;
  field: string;
  thread: GrammarThread;
}

export class ConstraintCompiler {
  /** the live workers, oldest first */
  private threads: GrammarThread[] = [];
  /** the worker that holds (or is compiling) each grammar, by its key */
  private readonly grammars = new Map<string, GrammarThread>();
  private readonly live = new Map<number, LiveMatcher>();
  /** the worker of the latest compile or matcher (tests) */
  private latest: GrammarThread | undefined;
  private vocab: Promise<{ text: string; lengths: Uint32Array }> | undefined;
  private nextMatcher = 0;
  private readonly stopTokens: ReadonlySet<number>;

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly limits: GrammarLimits = { ...DEFAULT_GRAMMAR_LIMITS },
  ) {
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

  /**
   * The worker for grammar `key`: the one that holds it; else a worker with neither a compile in flight
   * nor a live matcher; else a new one (up to GrammarLimits.workers); else the one whose fewest matchers
   * would wait behind the compile (they sit their steps out meanwhile).
   */
  private async threadFor(key: string): Promise<GrammarThread> {
    const xgrammar = xgrammarFile();
    const vocab = await this.workerVocab();
    const holder = this.grammars.get(key);
    if (holder && !holder.dead) return holder;
    const matchersOn = (thread: GrammarThread): number => {
      let count = 0;
      for (const entry of this.live.values()) if (entry.thread === thread) count++;
      return count;
    };
    let thread = this.threads.find((t) => t.compiling === undefined && matchersOn(t) === 0);
    if (!thread && this.threads.length < this.limits.workers) thread = this.start(xgrammar, vocab);
    thread ??= this.threads.reduce((best, t) => {
      const cost = (x: GrammarThread): number => (x.compiling === undefined ? 0 : 1_000_000) + matchersOn(x);
      return cost(t) < cost(best) ? t : best;
    });
    this.grammars.set(key, thread);
    return thread;
  }

  private start(xgrammar: string, vocab: { text: string; lengths: Uint32Array }): GrammarThread {
    const thread = new GrammarThread(
      {
        xgrammarFile: xgrammar,
        vocabText: vocab.text,
        vocabLengths: vocab.lengths,
        vocabSize: this.tokenizer.vocabSize,
        stopTokenIds: [...this.stopTokens],
        cacheEntries: COMPILED_GRAMMAR_CACHE_ENTRIES,
        memoryBytes: this.limits.memoryMiB * 2 ** 20,
        numberDigits: { ...NUMBER_DIGITS },
      },
      // the budget is read when a compile starts
      this.limits,
    );
    thread.onDeath((end) => this.ended(thread, end));
    this.threads.push(thread);
    return thread;
  }

  /** A worker ended: it holds nothing any more; after a restart its matchers move to another worker. */
  private ended(thread: GrammarThread, end: GrammarThreadEnd): void {
    this.threads = this.threads.filter((t) => t !== thread);
    for (const [key, holder] of this.grammars) if (holder === thread) this.grammars.delete(key);
    if (!end.restart) return;
    for (const entry of this.live.values()) {
      if (entry.thread !== thread) continue;
      if (entry.matcher.id === end.culprit?.matcher) entry.matcher.fail(end.culprit.error);
      else entry.matcher.relocate(() => this.recreate(entry));
    }
  }

  /** `entry`'s matcher made again on a live worker (its grammar compiled there, not timed: it compiled in time before). */
  private async recreate(entry: LiveMatcher): Promise<GrammarThread> {
    const { thread } = await this.send(
      entry.key,
      { op: "create", matcher: entry.matcher.id, key: entry.key, source: entry.source, field: entry.field },
      false,
    );
    entry.thread = thread;
    return thread;
  }

  /** Sends a compile or create of grammar `key` to its worker, again on another one when that worker was ended for another request. */
  private async send(
    key: string,
    request: GrammarThreadRequest,
    budgeted = true,
  ): Promise<{ thread: GrammarThread; reply: GrammarThreadReply }> {
    for (let attempt = 0; ; attempt++) {
      const thread = await this.threadFor(key);
      this.latest = thread;
      try {
        return { thread, reply: await thread.request(request, { budgeted }) };
      } catch (error) {
        // a grammar that failed is not kept there (the next attempt compiles it afresh)
        if (this.grammars.get(key) === thread) this.grammars.delete(key);
        if (!(error instanceof GrammarWorkerRestart) || attempt >= MAX_RESTART_RETRIES) throw error;
      }
    }
  }

  /** Compiles `source` and checks it compiles (the grammar engine's errors as ConstraintError). */
  async check(source: GrammarSource, field: string): Promise<void> {
    const key = JSON.stringify(source);
    await this.send(key, { op: "compile", key, source, field });
  }

  /** A fresh matcher of `source` (compiled, cached); `release` gives it back (call it once). */
  async matcher(source: GrammarSource, field: string): Promise<{ matcher: RemoteMatcher; release: () => void }> {
    const key = JSON.stringify(source);
    const id = this.nextMatcher++;
    let sent: { thread: GrammarThread; reply: GrammarThreadReply };
    try {
      sent = await this.send(key, { op: "create", matcher: id, key, source, field });
    } catch (error) {
      if (ConstraintError.isInstance(error)) throw error;
      throw new ConstraintError("CONSTRAINT_ENGINE_UNAVAILABLE", `the grammar engine failed: ${(error as Error).message}`, {
        field,
        cause: error,
      });
    }
    const matcher = new RemoteMatcher(sent.thread, id, sent.reply.masks[0]!, this.stopTokens);
    const entry: LiveMatcher = { matcher, key, source, field, thread: sent.thread };
    this.live.set(id, entry);
    return {
      matcher,
      release: () => {
        this.live.delete(id);
        matcher.dispose();
      },
    };
  }

  /** Ends the grammar workers (requests waiting on them fail); the next request starts a new one. */
  async dispose(): Promise<void> {
    const threads = this.threads;
    this.threads = [];
    this.grammars.clear();
    this.live.clear();
    this.latest = undefined;
    await Promise.all(threads.map((thread) => thread.terminate()));
  }

  /** Tests: the worker of the latest compile or matcher, while it lives. */
  get workerForTests(): GrammarThread | undefined {
    return this.latest && !this.latest.dead ? this.latest : undefined;
  }

  /** Tests: the live workers. */
  get workersForTests(): readonly GrammarThread[] {
    return this.threads;
  }
}
