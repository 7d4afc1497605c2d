/**
 * The grammar engine: xgrammar's WebAssembly build (`@mlc-ai/web-xgrammar`). It runs on a worker
 * thread (grammar-worker.ts), started by the first constrained request (engine users without
 * constraints never load it). This module is the main thread's side: the package's file, resolved
 * here so that a bundle of the engine (the CLI) finds it as the engine does, and the types of the
 * parts of its JS API the worker uses.
 */
import { createRequire } from "node:module";
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
export interface XgCompiler {
  compileGrammar(ebnf: string, rootRule?: string): Promise<XgCompiledGrammar>;
  compileStructuralTag(tag: Record<string, unknown>): Promise<XgCompiledGrammar>;
}
interface XgTokenizerInfo {
  getVocabSize(): number;
}
export interface XgModule {
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
  /** the defaults kept: no stop-token override, terminateWithoutStopToken = false, unlimited rollback */
  GrammarMatcher: { createGrammarMatcher(grammar: XgCompiledGrammar): Promise<XgGrammarMatcher> };
  Testings: {
    _jsonSchemaToEBNF(
      schema: string,
      anyWhitespace?: boolean,
      indent?: number,
      separators?: [string, string],
      strictMode?: boolean,
      maxWhitespaceCount?: number,
      /** "xml": the parameters of a tool call in Qwen's XML format */
      jsonFormat?: "json" | "xml",
    ): Promise<string>;
  };
}

let requested = false;

/** Whether this process has started a grammar engine (tests: an unconstrained engine never does). */
export function grammarEngineRequested(): boolean {
  return requested;
}

/** The file of @mlc-ai/web-xgrammar (for the worker to load); marks the grammar engine requested. */
export function xgrammarFile(): string {
  requested = true;
  try {
    return createRequire(import.meta.url).resolve("@mlc-ai/web-xgrammar");
  } catch (error) {
    throw new ConstraintError(
      "CONSTRAINT_ENGINE_UNAVAILABLE",
      `constrained decoding needs the npm package @mlc-ai/web-xgrammar (a dependency of @keepquant/engine), which is not installed: ${(error as Error).message}`,
      { cause: error },
    );
  }
}
