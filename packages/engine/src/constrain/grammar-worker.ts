/**
 * The grammar engine's thread: xgrammar's WebAssembly build with the tokenizer's vocabulary, the
 * compiled-grammar cache and every matcher of one ConstraintCompiler live in one worker (web-xgrammar
 * cannot serialize a compiled grammar, so compiling and matching share one WebAssembly instance).
 *
 * `grammarWorkerMain` is the worker's whole program. It runs from its source text (`eval` worker,
 * see `grammarWorkerSource`), so the same code works from the TypeScript sources under vitest, from
 * the engine's dist and from the CLI's bundle, with no worker file to locate. It must therefore be
 * self-contained: no imports (the worker receives a loader of Node's built-in modules), no helpers of
 * this module, only types.
 *
 * Messages are handled one at a time in arrival order, so a fire-and-forget `accept` or `rollBack`
 * followed by an awaited `mask` sees the matcher after them.
 */
import type { ConstraintErrorCode } from "./errors.js";
import type { GrammarSource } from "./spec.js";
import type { XgCompiledGrammar, XgGrammarMatcher, XgModule } from "./xgrammar.js";

/** What the worker is started with (its `workerData`). */
export interface GrammarWorkerData {
  /** the resolved file of @mlc-ai/web-xgrammar (resolved by the host, so bundles find it too) */
  xgrammarFile: string;
  /** the vocabulary in xgrammar's byte-level alphabet, concatenated (one string clones fast) */
  vocabText: string;
  /** each token's length in `vocabText` (UTF-16 units) */
  vocabLengths: Uint32Array;
  vocabSize: number;
  stopTokenIds: number[];
  /** compiled grammars kept for reuse */
  cacheEntries: number;
  /** bytes of WebAssembly memory the grammar engine may grow to (GrammarLimits.memoryMiB) */
  memoryBytes: number;
  /** most digits of a generated number's integer part, fraction and exponent (integer-ranges.ts NUMBER_DIGITS) */
  numberDigits: { integer: number; fraction: number; exponent: number };
}

/** The grammar worker's exit code after its WebAssembly runtime aborted (it cannot run anything again). */
export const GRAMMAR_WORKER_EXIT_ABORTED = 70;

/** Requests with an `id` get one reply; the others are fire-and-forget. */
export type GrammarWorkerRequest =
  /** compiles `source` into the cache under `key` */
  | { op: "compile"; id: number; key: string; source: GrammarSource; field: string }
  /** a new matcher `matcher` of `source` (compiled if needed); replies with its first mask */
  | { op: "create"; id: number; matcher: number; key: string; source: GrammarSource; field: string }
  /** the matcher's current mask */
  | { op: "mask"; id: number; matcher: number }
  /**
   * The masks along `drafts` from the current position (the current one first when `withCurrent`),
   * up to the first draft the grammar refuses or the stop token that ends it; the matcher is rolled
   * back afterwards.
   */
  | { op: "prepare"; id: number; matcher: number; drafts: number[]; withCurrent: boolean }
  /**
   * The closing walk from the current position (guide.ts): at each position the first of `closers` (token
   * sequences) the grammar takes whole, else the allowed token of most bytes (not `avoid`ed after MAX_REPEATS
   * choices of one token in a row), until a stop token is allowed; at most `limit` tokens before it. Replies with
   * the `plan` (stop token last), or none; the matcher is rolled back afterwards.
   */
  | { op: "close"; id: number; matcher: number; limit: number; closers: number[][]; maxRepeats: number }
  /** accepts `tokens` (the host knows they are allowed); `terminated`: the state the host expects after them */
  | { op: "accept"; matcher: number; tokens: number[]; terminated: boolean }
  | { op: "rollBack"; matcher: number; tokens: number }
  | { op: "dispose"; matcher: number }
  /** tests: the worker dies as a crash would kill it, or (`abort`) its WebAssembly runtime aborts */
  | { op: "crash"; abort?: boolean }
  /** tests: the worker blocks until `flag[0]` is set (a slow mask holding it) */
  | { op: "hold"; flag: Int32Array };

export interface GrammarWorkerError {
  /** a ConstraintError code, or "internal" (a host/worker disagreement: a bug) */
  code: ConstraintErrorCode | "internal";
  message: string;
  field?: string;
  /** the worker cannot serve anything any more (its WebAssembly runtime aborted) */
  fatal?: boolean;
  /**
   * With `fatal`: the request of this reply (or the fire-and-forget message of matcher `matcher`) alone is
   * at fault (its grammar ran past the memory bound, or aborted the runtime): the others can move to a new worker.
   */
  alone?: boolean;
  matcher?: number;
}

export type GrammarWorkerReply =
  | { id: number; masks: Int32Array[]; accepted: number; terminated: boolean; plan?: number[] }
  | { id: number; error: GrammarWorkerError }
  /** a compile of request `id` starts now (its grammar was not cached): the host's time budget runs from here */
  | { id: number; compiling: true; field: string };

/** The worker program (see the module comment: self-contained, `load` returns a built-in module). */
export function grammarWorkerMain(load: (id: string) => unknown): void {
  const { parentPort, workerData } = load("node:worker_threads") as typeof import("node:worker_threads");
  const fs = load("node:fs") as typeof import("node:fs");
  const path = load("node:path") as typeof import("node:path");
  const Module = load("node:module") as typeof import("node:module");
  const data = workerData as GrammarWorkerData;
  const port = parentPort!;

  // JSON is generated in one canonical layout: one line, `", "` and `": "` as separators, no other
  // whitespace (xgrammar's `any_whitespace = false, indent = -1`). Free whitespace would let a model
  // fill its whole budget with blanks between tokens; a fixed layout is also what a parser expects.
  const JSON_ANY_WHITESPACE = false;
  const JSON_ONE_LINE = -1;
  // xgrammar's character class of a length-bounded string, and JSON's unescaped string character
  const BOUNDED_STRING_CHAR = String.raw`[^"\\\r\n]`;
  const JSON_STRING_CHAR = String.raw`[^\0-\x1f"\\]`;
  const MAX_PRINTED_LINES = 16;
  /** the worker's exit code after its WebAssembly runtime aborted (GRAMMAR_WORKER_EXIT_ABORTED) */
  const EXIT_ABORTED = 70;
  const WASM_PAGE_BYTES = 65_536;

  // The memory bound: xgrammar's runtime grows its WebAssembly memory through Memory.prototype.grow (of
  // this worker's own realm). Growth past the bound is refused; the runtime then aborts (or its call
  // fails), which fails the request that asked for it with CONSTRAINT_TOO_COMPLEX.
  let memoryRefused: number | undefined;
  interface WasmMemory {
    readonly buffer: ArrayBuffer;
    grow(delta: number): number;
  }
  const memoryPrototype = (globalThis as unknown as { WebAssembly: { Memory: { prototype: WasmMemory } } }).WebAssembly.Memory.prototype;
  const grow = memoryPrototype.grow;
  memoryPrototype.grow = function (this: WasmMemory, delta: number): number {
    const bytes = this.buffer.byteLength + delta * WASM_PAGE_BYTES;
    if (bytes > data.memoryBytes) {
      memoryRefused = Math.max(memoryRefused ?? 0, bytes);
      throw new RangeError(`growing the grammar engine's memory to ${bytes} bytes was refused (bound ${data.memoryBytes})`);
    }
    const pages = grow.call(this, delta);
    // the runtime retries a refused growth with smaller ones: one that fits means the allocation succeeded
    memoryRefused = undefined;
    return pages;
  };
  const memoryError = (field: string): GrammarWorkerError => ({
    code: "CONSTRAINT_TOO_COMPLEX",
    message: `${field}: the grammar engine needed more than ${Math.round(data.memoryBytes / 2 ** 20)} MiB of memory (grammarLimits.memoryMiB) for this grammar; simplify it (fewer or shorter length-bounded strings, fewer alternatives)`,
    field,
    fatal: true,
    alone: true,
  });
  // An aborted WebAssembly runtime (emscripten's "Aborted(...)", e.g. a grammar past an internal limit)
  // cannot run anything again.
  const isAbort = (error: unknown): boolean =>
    (error as Error)?.name === "RuntimeError" || /^Aborted\(/.test(String((error as Error)?.message ?? ""));

  // The WebAssembly runtime writes diagnostics ("[FATAL] ...") to the console: this thread never
  // prints, its console is a sink whose last lines become the messages of our errors.
  const printed: string[] = [];
  const sink = (...parts: unknown[]): void => {
    printed.push(parts.map(String).join(" "));
    if (printed.length > MAX_PRINTED_LINES) printed.shift();
  };
  const quiet = console as unknown as Record<string, unknown>;
  for (const name of ["log", "error", "warn", "info", "debug", "trace"]) quiet[name] = sink;
  for (const stream of [process.stdout, process.stderr]) {
    stream.write = ((chunk: unknown) => {
      sink(String(chunk).trimEnd());
      return true;
    }) as typeof stream.write;
  }
  const takePrinted = (): string[] => printed.splice(0, printed.length);

  class WorkerError extends Error {
    constructor(readonly detail: GrammarWorkerError) {
      super(detail.message);
    }
  }

  interface Engine {
    xg: XgModule;
    compiler: Awaited<ReturnType<XgModule["GrammarCompiler"]["createGrammarCompiler"]>>;
  }
  let engine: Promise<Engine> | undefined;

  /** xgrammar, initialized once, with the vocabulary (its TokenizerInfo) and a compiler. */
  const ready = (): Promise<Engine> => {
    engine ??= (async () => {
      try {
        // a UMD script in a "type": "module" package: compiled here as the CommonJS module it is
        const mod = new Module(data.xgrammarFile) as InstanceType<typeof Module> & {
          _compile(source: string, filename: string): void;
          paths: string[];
        };
        mod.filename = data.xgrammarFile;
        mod.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(path.dirname(data.xgrammarFile));
        mod._compile(fs.readFileSync(data.xgrammarFile, "utf8"), data.xgrammarFile);
        const xg = mod.exports as XgModule;
        const vocab = new Array<string>(data.vocabSize);
        let at = 0;
        for (let id = 0; id < data.vocabSize; id++) {
          const length = data.vocabLengths[id]!;
          vocab[id] = data.vocabText.slice(at, at + length);
          at += length;
        }
        const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, "byte_level", false, data.vocabSize, data.stopTokenIds);
        const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
        takePrinted();
        return { xg, compiler };
      } catch (error) {
        engine = undefined;
        const lines = takePrinted().join("; ");
        if (memoryRefused !== undefined) {
          // not a grammar's fault: every request fails, as the next worker's would with the same bound
          throw new WorkerError({
            code: "CONSTRAINT_ENGINE_UNAVAILABLE",
            message: `the grammar engine failed to start: its view of the vocabulary needs more than ${Math.round(data.memoryBytes / 2 ** 20)} MiB of memory (grammarLimits.memoryMiB)`,
            fatal: true,
          });
        }
        throw new WorkerError({
          code: "CONSTRAINT_ENGINE_UNAVAILABLE",
          message: `the grammar engine failed to start: ${(error as Error).message ?? String(error)}${lines ? ` (${lines})` : ""}`,
        });
      }
    })();
    return engine;
  };

  /**
   * Runs a grammar-engine call; a failure becomes the request error with the runtime's message (fatal,
   * the request alone at fault, when it aborted the runtime or ran past the memory bound).
   */
  const guarded = async <T>(
    work: () => Promise<T>,
    code: "CONSTRAINT_BAD_SCHEMA" | "CONSTRAINT_BAD_GRAMMAR",
    field: string,
    what: string,
  ): Promise<T> => {
    takePrinted();
    try {
      return await work();
    } catch (error) {
      const lines = takePrinted()
        .filter((line) => /FATAL|error/i.test(line))
        // the runtime's own source place and failed check expression are its internals, not the reason
        .map((line) => line.replace(/^\[FATAL\]\s*\S+:\d+:\s*/, "").replace(/Check failed: \(.*?\) is false:?\s*/g, ""));
      const reason = lines.length > 0 ? lines.join("; ") : String((error as Error).message ?? error);
      if (memoryRefused !== undefined) throw new WorkerError(memoryError(field));
      throw new WorkerError({
        code,
        message: `${field}: ${what} was refused by the grammar engine: ${reason}`,
        field,
        ...(isAbort(error) ? { fatal: true, alone: true } : {}),
      });
    }
  };

  // The EBNF grammar of a JSON Schema in the canonical layout. xgrammar 0.1.27 writes the characters
  // of a length-bounded string (minLength / maxLength) as `[^"\\\r\n]`, which admits raw control
  // characters (a tab) that JSON forbids inside strings: they are narrowed to JSON's string characters.
  // Bounded integers come as placeholder constants (integer-ranges.ts, which xgrammar's converter does not bound
  // exactly): each placeholder's literal is replaced by a rule of the exact range.
  // xgrammar 0.1.27 accepts strings no alternative spells when a rule is a long alternation of string
  // literals: `"COP" | "CUC" | "CUP" | "IMP"` took "IMC", and a 164-code currency enum 19 of the 17,576 other
  // three-letter codes. The same words as a trie (one alternative per first character) take exactly them, so
  // every rule that is an alternation of three or more literals is written as one.
  const LITERAL = /"(?:[^"\\]|\\.)*"/y;
  const SIMPLE_ESCAPES: Readonly<Record<string, number>> = { '"': 0x22, "\\": 0x5c, n: 0x0a, r: 0x0d, t: 0x09 };
  /** The code points of an EBNF string literal's text, or undefined for an escape this does not read. */
  const unquote = (literal: string): number[] | undefined => {
    const out: number[] = [];
    const text = literal.slice(1, -1);
    for (let i = 0; i < text.length; ) {
      const c = text.codePointAt(i)!;
      if (c !== 0x5c) {
        out.push(c);
        i += c > 0xffff ? 2 : 1;
        continue;
      }
      const e = text[i + 1];
      if (e !== undefined && SIMPLE_ESCAPES[e] !== undefined) {
        out.push(SIMPLE_ESCAPES[e]!);
        i += 2;
      } else if (e === "x" && /^[0-9a-fA-F]{2}$/.test(text.slice(i + 2, i + 4))) {
        out.push(Number.parseInt(text.slice(i + 2, i + 4), 16));
        i += 4;
      } else if (e === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) {
        out.push(Number.parseInt(text.slice(i + 2, i + 6), 16));
        i += 6;
      } else return undefined;
    }
    return out;
  };
  const quote = (points: readonly number[]): string =>
    `"${points
      .map((c) =>
        c === 0x22
          ? '\\"'
          : c === 0x5c
            ? "\\\\"
            : c < 0x20 || c === 0x7f
              ? `\\x${c.toString(16).padStart(2, "0")}`
              : String.fromCodePoint(c),
      )
      .join("")}"`;
  const trie = (words: readonly (readonly number[])[]): string => {
    const groups = new Map<number, number[][]>();
    let empty = false;
    for (const word of words) {
      if (word.length === 0) {
        empty = true;
        continue;
      }
      const group = groups.get(word[0]!) ?? [];
      group.push(word.slice(1));
      groups.set(word[0]!, group);
    }
    const alternatives = [...groups].map(([first, rests]) =>
      rests.length === 1 ? quote([first, ...rests[0]!]) : `${quote([first])} ${trie(rests)}`,
    );
    if (empty) alternatives.unshift('""');
    return alternatives.length === 1 ? alternatives[0]! : `(${alternatives.join(" | ")})`;
  };
  /** A rule body of string literals (each maybe in parentheses) joined by `|`, as words; else undefined. */
  const literalAlternation = (body: string): number[][] | undefined => {
    const words: number[][] = [];
    let at = 0;
    const skip = (): void => {
      while (body[at] === " ") at++;
    };
    for (;;) {
      skip();
      const open = body[at] === "(";
      if (open) at++;
      LITERAL.lastIndex = at;
      const match = LITERAL.exec(body);
      if (!match) return undefined;
      const word = unquote(match[0]);
      if (!word) return undefined;
      words.push(word);
      at += match[0].length;
      if (open) {
        if (body[at] !== ")") return undefined;
        at++;
      }
      skip();
      if (at === body.length) return words.length >= 3 ? words : undefined;
      if (body[at] !== "|") return undefined;
      at++;
    }
  };
  const literalTries = (ebnf: string): string =>
    ebnf
      .split("\n")
      .map((line) => {
        const at = line.indexOf(" ::= ");
        if (at < 0) return line;
        const words = literalAlternation(line.slice(at + 5).trim());
        return words ? `${line.slice(0, at)} ::= ${trie(words)}` : line;
      })
      .join("\n");

  // xgrammar's numbers have digits without end: bounded as integer-ranges.ts bounds ours (NUMBER_DIGITS);
  // `repairedGrammar` also writes literal alternations as tries (above)
  const { integer, fraction, exponent } = data.numberDigits;
  const repairedGrammar = (ebnf: string): string =>
    literalTries(ebnf)
      .split("[1-9] [0-9]*")
      .join(`[1-9] [0-9]{0,${integer - 1}}`)
      .split('"." [0-9]+')
      .join(`"." [0-9]{1,${fraction}}`)
      .split("[eE] [+-]? [0-9]+")
      .join(`[eE] [+-]? [0-9]{1,${exponent}}`);

  const jsonSchemaGrammar = async (
    xg: XgModule,
    schema: string,
    strictMode: boolean,
    ranges: Readonly<Record<string, string>> = {},
  ): Promise<string> => {
    let ebnf = repairedGrammar(await xg.Testings._jsonSchemaToEBNF(schema, JSON_ANY_WHITESPACE, JSON_ONE_LINE, undefined, strictMode))
      .split(BOUNDED_STRING_CHAR)
      .join(JSON_STRING_CHAR);
    const rules: string[] = [];
    for (const [literal, text] of Object.entries(ranges)) {
      if (!ebnf.includes(literal)) continue;
      if (text.includes("%ITEM")) {
        // an object of ours (open-objects.ts): its placeholder is an array [marker, value 1, ..., other value], whose
        // rule is replaced by the object's, the items' rules kept for its values
        const lines = ebnf.split("\n");
        const markerRule = lines.find((line) => line.endsWith(` ::= ${literal}`))?.split(" ::= ")[0];
        const first = markerRule ?? literal;
        const at = lines.findIndex((line) => line.includes(`(${first} ", " `) && line.endsWith(`) "" "]")`));
        if (at < 0) throw new Error(`internal: the placeholder of an object (${literal}) is not in the grammar`);
        const [head, body] = [lines[at]!.slice(0, lines[at]!.indexOf(" ::= ")), lines[at]!.slice(lines[at]!.indexOf(" ::= ") + 5)];
        const inner = body.slice(body.indexOf(`(${first} ", " `) + first.length + 1, body.lastIndexOf(`) "" "]"`));
        const items = inner.split(` ", " `).filter((item) => item !== "");
        if (items.some((item) => !/^[A-Za-z0-9_]+$/.test(item)))
          throw new Error(`internal: the items of an object's placeholder are not rule names: ${inner}`);
        const name = `kq_object_${rules.length}`;
        lines[at] = `${head} ::= ${name}`;
        ebnf = lines.join("\n");
        let rule = text.split("%RANGE%").join(name);
        items.forEach((item, i) => {
          rule = rule.split(`%ITEM${i + 1}%`).join(item);
        });
        rules.push(rule);
        continue;
      }
      const name = `kq_int_range_${rules.length}`;
      ebnf = ebnf.split(literal).join(name);
      // the rules come named "%RANGE%" (integer-ranges.ts's RANGE_NAME)
      rules.push(text.split("%RANGE%").join(name));
    }
    return rules.length === 0 ? ebnf : `${ebnf}\n${rules.join("\n")}\n`;
  };

  // The parameters of a tool call in Qwen's XML format, in the template's own layout: each
  // `\n<parameter=NAME>\nVALUE\n</parameter>` (the call's begin ends at `<function=NAME>`), no other whitespace.
  // xgrammar's XML converter allows any whitespace around the tags (`[ \n\t]*`) even without any_whitespace:
  // a model could spend its whole budget on it. Each such run becomes the one newline of the layout.
  const ANY_WHITESPACE = "[ \\n\\t]*";
  const xmlParametersGrammar = async (xg: XgModule, schema: string): Promise<string> =>
    repairedGrammar(await xg.Testings._jsonSchemaToEBNF(schema, JSON_ANY_WHITESPACE, JSON_ONE_LINE, undefined, true, undefined, "xml"))
      // what may follow a JSON string: no whitespace in this layout
      .split(`(= ${ANY_WHITESPACE} `)
      .join("(= ")
      // an empty lookahead (what nothing may follow) is not one xgrammar's own parser reads back
      .split(" (= )")
      .join("")
      .replace(/("<parameter=[^"\n]*>") \[ \\n\\t\]\*/g, '$1 "\\n"')
      .replace(/\[ \\n\\t\]\* "<\/parameter>"/g, '"\\n" "</parameter>"')
      // what is left comes before a parameter
      .split(ANY_WHITESPACE)
      .join('"\\n"')
      .split(BOUNDED_STRING_CHAR)
      .join(JSON_STRING_CHAR);

  // A structural tag whose `json_schema` contents are replaced by their grammars in the canonical
  // JSON layout (a structural tag's own JSON contents allow any whitespace).
  const withJsonGrammars = async (xg: XgModule, node: unknown, ranges: Readonly<Record<string, string>> = {}): Promise<unknown> => {
    if (Array.isArray(node)) return Promise.all(node.map((item) => withJsonGrammars(xg, item, ranges)));
    if (typeof node !== "object" || node === null) return node;
    const record = node as Record<string, unknown>;
    if (record["type"] === "qwen_xml_parameter") {
      return { type: "grammar", grammar: await xmlParametersGrammar(xg, JSON.stringify(record["json_schema"])) };
    }
    if (record["type"] === "json_schema") {
      return { type: "grammar", grammar: await jsonSchemaGrammar(xg, JSON.stringify(record["json_schema"]), true, ranges) };
    }
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(record)) out[key] = await withJsonGrammars(xg, value, ranges);
    return out;
  };

  interface CacheEntry {
    grammar: XgCompiledGrammar;
    users: number;
  }
  /** compiled grammars by their source, least recently used first */
  const cache = new Map<string, CacheEntry>();

  const evict = (): void => {
    for (const [key, entry] of cache) {
      if (cache.size <= data.cacheEntries) return;
      if (entry.users > 0) continue;
      cache.delete(key);
      entry.grammar.dispose();
    }
  };

  /** `source` compiled (cached); `id`: the request, told when a compile starts (the host times it from there). */
  const compile = async (key: string, source: GrammarSource, field: string, id: number): Promise<CacheEntry> => {
    const hit = cache.get(key);
    if (hit) {
      cache.delete(key);
      cache.set(key, hit);
      return hit;
    }
    const { xg, compiler } = await ready();
    const sourceField = `${field}.${source.kind === "json_schema" ? "schema" : source.kind === "ebnf" ? "ebnf" : "tools"}`;
    port.postMessage({ id, compiling: true, field: sourceField } satisfies GrammarWorkerReply);
    let grammar: XgCompiledGrammar;
    switch (source.kind) {
      case "json_schema":
        grammar = await guarded(
          async () => compiler.compileGrammar(await jsonSchemaGrammar(xg, source.schema, source.strictMode, source.ranges), "root"),
          "CONSTRAINT_BAD_SCHEMA",
          sourceField,
          "the JSON Schema",
        );
        break;
      case "ebnf":
        grammar = await guarded(() => compiler.compileGrammar(source.ebnf, "root"), "CONSTRAINT_BAD_GRAMMAR", sourceField, "the grammar");
        break;
      case "structural_tag":
        grammar = await guarded(
          async () => compiler.compileStructuralTag((await withJsonGrammars(xg, source.tag, source.ranges)) as Record<string, unknown>),
          "CONSTRAINT_BAD_SCHEMA",
          sourceField,
          "the tool schemas",
        );
        break;
    }
    const entry: CacheEntry = { grammar, users: 0 };
    cache.set(key, entry);
    evict();
    return entry;
  };

  interface MatcherEntry {
    matcher: XgGrammarMatcher;
    grammar: CacheEntry;
    /** the request parameter of its constraint (for errors) */
    field: string;
    /** set when the host and the matcher disagreed (then every later request of it fails) */
    broken?: string;
  }
  const matchers = new Map<number, MatcherEntry>();

  const matcherOf = (id: number): MatcherEntry => {
    const entry = matchers.get(id);
    if (!entry) throw new WorkerError({ code: "internal", message: `internal: grammar matcher ${id} does not exist` });
    if (entry.broken) throw new WorkerError({ code: "internal", message: entry.broken });
    return entry;
  };

  const reply = (message: GrammarWorkerReply): void => {
    port.postMessage(message, "masks" in message ? message.masks.map((mask) => mask.buffer as ArrayBuffer) : []);
  };
  const masksReply = (id: number, masks: Int32Array[], accepted = 0, terminated = false): void =>
    reply({ id, masks, accepted, terminated });

  const allows = (bits: Int32Array, id: number): boolean => (((bits[id >> 5] ?? 0) >>> (id & 31)) & 1) === 1;
  /** The allowed token of most bytes other than `avoid` (the lowest id among equals). */
  const longestAllowed = (bits: Int32Array, avoid: number | undefined): number | undefined => {
    let best: number | undefined;
    let bestLength = -1;
    for (let w = 0; w < bits.length; w++) {
      let word = bits[w]!;
      while (word !== 0) {
        const low = word & -word;
        const id = w * 32 + (31 - Math.clz32(low));
        word ^= low;
        const length = id < data.vocabSize ? data.vocabLengths[id]! : 0;
        if (length > bestLength && id !== avoid) {
          best = id;
          bestLength = length;
        }
      }
    }
    return best;
  };
  /** The "close" request's walk (see its comment); the matcher ends where it started. */
  const closingWalk = async (
    matcher: XgGrammarMatcher,
    request: { limit: number; closers: number[][]; maxRepeats: number },
  ): Promise<number[] | undefined> => {
    const plan: number[] = [];
    let accepted = 0;
    let previous: number | undefined;
    let repeats = 0;
    try {
      while (accepted <= request.limit) {
        if (matcher.isTerminated()) return plan;
        const bits = await matcher.getNextTokenBitmask();
        const stop = data.stopTokenIds.find((id) => allows(bits, id));
        if (stop !== undefined) {
          plan.push(stop);
          return plan;
        }
        const avoid = repeats >= request.maxRepeats ? previous : undefined;
        let step: number[] | undefined;
        for (const closer of request.closers) {
          if (closer[0] === avoid || !allows(bits, closer[0]!)) continue;
          let taken = 0;
          while (taken < closer.length && !matcher.isTerminated() && matcher.acceptToken(closer[taken]!)) taken++;
          if (taken === closer.length) {
            step = closer;
            break;
          }
          if (taken > 0) matcher.rollBack(taken);
        }
        if (step === undefined) {
          const token = longestAllowed(bits, avoid) ?? avoid;
          if (token === undefined || !matcher.acceptToken(token)) return undefined;
          step = [token];
        }
        accepted += step.length;
        plan.push(...step);
        repeats = step[0] === previous ? repeats + 1 : 0;
        previous = step[0];
      }
      return undefined;
    } finally {
      // (the stop token that ends a walk is not accepted)
      if (accepted > 0) matcher.rollBack(accepted);
    }
  };

  const handle = async (request: GrammarWorkerRequest): Promise<void> => {
    switch (request.op) {
      case "compile":
        await compile(request.key, request.source, request.field, request.id);
        return masksReply(request.id, []);
      case "create": {
        const grammar = await compile(request.key, request.source, request.field, request.id);
        const { xg } = await ready();
        const matcher = await xg.GrammarMatcher.createGrammarMatcher(grammar.grammar);
        grammar.users++;
        matchers.set(request.matcher, { matcher, grammar, field: request.field });
        return masksReply(request.id, [await matcher.getNextTokenBitmask()]);
      }
      case "mask":
        return masksReply(request.id, [await matcherOf(request.matcher).matcher.getNextTokenBitmask()]);
      case "prepare": {
        const { matcher } = matcherOf(request.matcher);
        const masks = request.withCurrent ? [await matcher.getNextTokenBitmask()] : [];
        let accepted = 0;
        let terminated = false;
        try {
          for (const draft of request.drafts) {
            if (!matcher.acceptToken(draft)) break;
            accepted++;
            if (matcher.isTerminated()) {
              terminated = true;
              break;
            }
            masks.push(await matcher.getNextTokenBitmask());
          }
        } finally {
          if (accepted > 0) matcher.rollBack(accepted);
        }
        return masksReply(request.id, masks, accepted, terminated);
      }
      case "close": {
        const { matcher } = matcherOf(request.matcher);
        const plan = await closingWalk(matcher, request);
        return reply({ id: request.id, masks: [], accepted: 0, terminated: false, ...(plan ? { plan } : {}) });
      }
      case "accept": {
        const entry = matcherOf(request.matcher);
        for (const token of request.tokens) {
          if (!entry.matcher.acceptToken(token)) {
            entry.broken = `internal: the grammar matcher refused token ${token}, which its mask allowed`;
            return;
          }
        }
        if (entry.matcher.isTerminated() !== request.terminated) {
          entry.broken = `internal: the grammar matcher is ${request.terminated ? "not " : ""}terminated after token ${request.tokens.at(-1)}, unlike its mirror`;
        }
        return;
      }
      case "rollBack":
        matcherOf(request.matcher).matcher.rollBack(request.tokens);
        return;
      case "dispose": {
        const entry = matchers.get(request.matcher);
        if (!entry) return;
        matchers.delete(request.matcher);
        entry.matcher.dispose();
        entry.grammar.users--;
        evict();
        return;
      }
      case "hold":
        Atomics.wait(request.flag, 0, 0);
        return;
      case "crash":
        if (request.abort) throw Object.assign(new Error("Aborted(tests)"), { name: "RuntimeError" });
        // the messages after this one are never handled (as when the thread dies mid-request)
        await new Promise<never>(() =>
          setImmediate(() => {
            throw new Error("the grammar worker was told to crash (tests)");
          }),
        );
        return;
    }
  };

  // After an aborted runtime (or a grammar past the memory bound) every request fails with `fatal` (the
  // host then ends this worker and starts a new one for the next request), and the worker ends itself.
  let aborted: GrammarWorkerError | undefined;

  let queue = Promise.resolve();
  port.on("message", (request: GrammarWorkerRequest) => {
    queue = queue.then(async () => {
      if (aborted) {
        if ("id" in request) reply({ id: request.id, error: aborted });
        return;
      }
      memoryRefused = undefined;
      try {
        await handle(request);
      } catch (caught) {
        let error = caught;
        if (memoryRefused !== undefined && !(error instanceof WorkerError && error.detail.fatal)) {
          const field =
            "field" in request
              ? request.field
              : "matcher" in request
                ? (matchers.get(request.matcher)?.field ?? "constraint")
                : "constraint";
          error = new WorkerError(memoryError(field));
        }
        if (error instanceof WorkerError && error.detail.fatal) {
          // `alone`: this request alone is at fault (it fails with its error, the host moves the others to a new
          // worker); otherwise every request fails
          aborted = { ...error.detail, ...(!("id" in request) && "matcher" in request ? { matcher: request.matcher } : {}) };
          reply({ id: "id" in request ? request.id : -1, error: aborted });
          setImmediate(() => process.exit(EXIT_ABORTED));
          return;
        }
        if (isAbort(error)) {
          aborted = {
            code: "CONSTRAINT_ENGINE_UNAVAILABLE",
            message: `the grammar engine's WebAssembly runtime aborted (${(error as Error).message}); the next constrained request starts a new one`,
            fatal: true,
          };
          // told even when nothing waits for a reply (a fire-and-forget accept aborted)
          reply({ id: "id" in request ? request.id : -1, error: aborted });
          setImmediate(() => process.exit(EXIT_ABORTED));
          return;
        }
        const detail =
          error instanceof WorkerError
            ? error.detail
            : {
                code: "CONSTRAINT_ENGINE_UNAVAILABLE" as const,
                message: `the grammar engine failed: ${(error as Error).message ?? String(error)}`,
              };
        if ("id" in request) reply({ id: request.id, error: detail });
        else if ("matcher" in request) {
          const entry = matchers.get(request.matcher);
          if (entry) entry.broken = `internal: ${request.op} failed in the grammar engine: ${detail.message}`;
        }
      }
    });
  });
}

/**
 * The worker's source text: the program above, given `process.getBuiltinModule` (Node >= 20.16), which
 * an eval worker has both as a script and as a module (it inherits the host's --input-type).
 */
export function grammarWorkerSource(): string {
  return `(${grammarWorkerMain.toString()})((id) => process.getBuiltinModule(id));\n`;
}
