/**
 * The grammar engine: xgrammar's WebAssembly build (`@mlc-ai/web-xgrammar`), loaded on the first
 * constrained request only (engine users without constraints never load it).
 *
 * The package is a UMD script in a `"type": "module"` package, so Node's ESM loader cannot run it
 * (it calls `require`); it is compiled here as the CommonJS module it is. Its WebAssembly runtime
 * writes diagnostics ("[FATAL] ...", "[WARNING] ...") to the console: library code must not print,
 * so the runtime's print functions are bound to a sink while it initializes, and the lines it
 * writes become the messages of our errors instead.
 */
import fs from "node:fs";
import Module, { createRequire } from "node:module";
import path from "node:path";
import { ConstraintError } from "./errors.js";

/** The parts of xgrammar's JS API used here (its own .d.ts types them; kept minimal and local). */
export interface XgGrammarMatcher {
  acceptToken(tokenId: number): boolean;
  getNextTokenBitmask(): Promise<Int32Array>;
  isTerminated(): boolean;
  rollBack(tokens: number): void;
  dispose(): void;
}
export interface XgCompiledGrammar {
  dispose(): void;
}
interface XgCompiler {
  compileJSONSchema(
    schema: string,
    anyWhitespace?: boolean,
    indent?: number,
    separators?: [string, string],
    strictMode?: boolean,
    maxWhitespaceCnt?: number,
  ): Promise<XgCompiledGrammar>;
  compileGrammar(ebnf: string, rootRule?: string): Promise<XgCompiledGrammar>;
  compileStructuralTag(tag: Record<string, unknown>): Promise<XgCompiledGrammar>;
}
interface XgTokenizerInfo {
  getVocabSize(): number;
}
interface XgModule {
  TokenizerInfo: {
    createTokenizerInfo(
      vocab: string[],
      vocabType: string,
      prependSpace: boolean,
      vocabSize: number,
      stopTokenIds: number[],
    ): Promise<XgTokenizerInfo>;
  };
  GrammarCompiler: { createGrammarCompiler(info: XgTokenizerInfo, cacheEnabled?: boolean): Promise<XgCompiler> };
  GrammarMatcher: { createGrammarMatcher(grammar: XgCompiledGrammar): Promise<XgGrammarMatcher> };
  Grammar: { builtinJSONGrammar(): Promise<{ dispose(): void }> };
  Testings: {
    _jsonSchemaToEBNF(
      schema: string,
      anyWhitespace?: boolean,
      indent?: number,
      separators?: [string, string],
      strictMode?: boolean,
    ): Promise<string>;
  };
}

/** The last lines the WebAssembly runtime printed (its error messages), newest last. */
const printed: string[] = [];
const MAX_PRINTED_LINES = 16;

function sink(...parts: unknown[]): void {
  printed.push(parts.map(String).join(" "));
  if (printed.length > MAX_PRINTED_LINES) printed.shift();
}

/** Takes what the runtime printed since the last call (e.g. the reason of a failed compile). */
export function takePrinted(): string[] {
  return printed.splice(0, printed.length);
}

let loading: Promise<XgModule> | undefined;

/** Loads and initializes xgrammar once per process. */
export function loadXgrammar(): Promise<XgModule> {
  loading ??= (async () => {
    let file: string;
    try {
      file = createRequire(import.meta.url).resolve("@mlc-ai/web-xgrammar");
    } catch (error) {
      throw new ConstraintError(
        "CONSTRAINT_ENGINE_UNAVAILABLE",
        `constrained decoding needs the npm package @mlc-ai/web-xgrammar (a dependency of @keepquant/engine), which is not installed: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const mod = new Module(file) as Module & { _compile(source: string, filename: string): void; paths: string[] };
    mod.filename = file;
    mod.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(path.dirname(file));
    mod._compile(fs.readFileSync(file, "utf8"), file);
    const xg = mod.exports as XgModule;
    // the runtime binds console.log / console.error when it first initializes: bind them to the sink
    const log = console.log;
    const error = console.error;
    console.log = sink;
    console.error = sink;
    try {
      (await xg.Grammar.builtinJSONGrammar()).dispose();
    } finally {
      console.log = log;
      console.error = error;
    }
    takePrinted();
    return xg;
  })();
  loading.catch(() => {
    loading = undefined;
  });
  return loading;
}

/** Runs a grammar-engine call; a failure becomes a ConstraintError with the runtime's message. */
export async function guarded<T>(
  work: () => Promise<T>,
  code: "CONSTRAINT_BAD_SCHEMA" | "CONSTRAINT_BAD_GRAMMAR",
  field: string,
  what: string,
): Promise<T> {
  takePrinted();
  try {
    return await work();
  } catch (error) {
    const lines = takePrinted()
      .filter((line) => /FATAL|error/i.test(line))
      .map((line) => line.replace(/^\[FATAL\]\s*\S+:\d+:\s*/, ""));
    const reason = lines.length > 0 ? lines.join("; ") : String((error as Error).message ?? error);
    throw new ConstraintError(code, `${field}: ${what} was refused by the grammar engine: ${reason}`, { field, cause: error });
  }
}
