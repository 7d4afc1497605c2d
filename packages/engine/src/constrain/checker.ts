/**
 * Checks JSON Schemas and instances against the constraint engine, with no model run (`keepquant schema check`,
 * `pnpm bench:maskbench`): the schema is checked and compiled as a request's `json_schema` constraint would be, and
 * each instance, written as Python's json.dumps writes it (python-json.ts, MaskBench's convention), is tokenized
 * and fed token by token. An instance is *accepted* when the grammar allows every token and then allows the end (a
 * stop token). MaskBench's verdicts: a valid instance rejected is a validation error (the grammar is too strict), an
 * invalid one accepted an invalidation error (output the schema forbids could come out).
 */
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import { ConstraintCompiler } from "./compiler.js";
import { ConstraintError } from "./errors.js";
import { DEFAULT_GRAMMAR_LIMITS, type GrammarLimits } from "./limits.js";
import { pythonJsonDumps } from "./python-json.js";
import { maskAllows } from "./remote-matcher.js";
import { resolveConstraint } from "./spec.js";

export interface SchemaTest {
  /** the instance (numbers as parsed, or as JsonNumber to keep their literal) */
  data: unknown;
  /** what the benchmark says (not used by the check; reported beside the verdict) */
  valid?: boolean;
}

export interface SchemaTestResult {
  accepted: boolean;
  /** tokens fed before the grammar refused one (or all of them) */
  tokens: number;
}

export interface SchemaCheckResult {
  compiled: boolean;
  error?: { code: string; message: string };
  /** the check and the compile (the grammar worker's, with its queue) */
  compileMs: number;
  tests: SchemaTestResult[];
  /** the time to get each token's mask (a round trip to the grammar worker included) */
  maskUs: { p50: number; p99: number; max: number } | undefined;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** A checker over one tokenizer; its grammar worker starts with the first schema. `dispose()` ends it. */
export class SchemaChecker {
  private readonly compiler: ConstraintCompiler;
  private readonly stopTokens: readonly number[];

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly limits: GrammarLimits = DEFAULT_GRAMMAR_LIMITS,
  ) {
    this.compiler = new ConstraintCompiler(tokenizer, limits);
    this.stopTokens = [...tokenizer.eogIds];
  }

  /**
   * Checks and compiles `schema`, then feeds each test's instance. Never throws for a bad schema: `compiled: false` and
   * the error. `openObjects`: objects take the other keys their schema allows (the constraint's `openObjects`).
   */
  async check(schema: unknown, tests: readonly SchemaTest[] = [], options: { openObjects?: boolean } = {}): Promise<SchemaCheckResult> {
    const started = performance.now();
    let made: Awaited<ReturnType<ConstraintCompiler["matcher"]>> | undefined;
    try {
      const source = resolveConstraint(
        { type: "json_schema", schema, ...(options.openObjects === true ? { openObjects: true } : {}) },
        "schema",
        this.limits,
      );
      // a test needs a fresh matcher; the first proves the schema compiles
      made = await this.compiler.matcher(source, "schema");
      const compileMs = performance.now() - started;
      const masks: number[] = [];
      const results: SchemaTestResult[] = [];
      for (let t = 0; t < tests.length; t++) {
        const current = t === 0 && made ? made : await this.compiler.matcher(source, "schema");
        made = current;
        const tokens = this.tokenizer.encode(pythonJsonDumps(tests[t]!.data), { addSpecial: false });
        results.push(await this.feed(current.matcher, tokens, masks));
        current.release();
        made = undefined;
      }
      masks.sort((a, b) => a - b);
      return {
        compiled: true,
        compileMs,
        tests: results,
        maskUs: masks.length > 0 ? { p50: quantile(masks, 0.5), p99: quantile(masks, 0.99), max: masks.at(-1)! } : undefined,
      };
    } catch (error) {
      if (!ConstraintError.isInstance(error)) throw error;
      return {
        compiled: false,
        // the messages name a request's field; here it is the schema itself
        error: { code: error.code, message: error.message.replace(/^schema\.schema/, "the schema") },
        compileMs: performance.now() - started,
        tests: [],
        maskUs: undefined,
      };
    } finally {
      made?.release();
    }
  }

  /** Feeds `tokens`; accepted when every one and then a stop token are allowed. */
  private async feed(
    matcher: Awaited<ReturnType<ConstraintCompiler["matcher"]>>["matcher"],
    tokens: readonly number[],
    masks: number[],
  ): Promise<SchemaTestResult> {
    for (let i = 0; i <= tokens.length; i++) {
      const before = performance.now();
      const mask = await matcher.mask();
      masks.push((performance.now() - before) * 1000);
      if (i === tokens.length) return { accepted: this.stopTokens.some((stop) => maskAllows(mask, stop)), tokens: i };
      if (!maskAllows(mask, tokens[i]!) || !matcher.acceptToken(tokens[i]!)) return { accepted: false, tokens: i };
    }
    return { accepted: false, tokens: tokens.length };
  }

  async dispose(): Promise<void> {
    await this.compiler.dispose();
  }
}
