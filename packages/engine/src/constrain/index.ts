/**
 * Constrained decoding and the thinking budget (docs/usage/structured-output.md). The engine keeps
 * one DecodeGuide per guided sequence; `GuidedDecoding` is what it calls.
 */
import type { ConstraintSpec } from "../engine-types.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import { ConstraintCompiler } from "./compiler.js";
import { ConstraintError } from "./errors.js";
import { DecodeGuide } from "./guide.js";
import { DEFAULT_GRAMMAR_LIMITS, type GrammarLimits } from "./limits.js";
import { type RelaxedKeyword, relaxJsonSchema } from "./relax.js";
import { type GrammarSource, resolveConstraint } from "./spec.js";

export { ConstraintError, type ConstraintErrorCode, type ConstraintErrorDetails } from "./errors.js";
export { checkJsonSchema, ENFORCED_FORMATS } from "./schema.js";
export { normalizeJsonSchema } from "./normalize.js";
export { SchemaChecker, type SchemaCheckResult, type SchemaTest, type SchemaTestResult } from "./checker.js";
export { JsonNumber, JsonTextError, parseJsonKeepingNumbers, plainJson, pythonJsonDumps } from "./python-json.js";
export { DecodeGuide, applyRule, type GuideMatcher, type GuideState, type PositionRule } from "./guide.js";
export { resolveConstraint, type GrammarSource } from "./spec.js";
export { DEFAULT_GRAMMAR_LIMITS, type GrammarLimits, resolveGrammarLimits } from "./limits.js";
export { relaxJsonSchema, type RelaxedKeyword, type RelaxedSchema } from "./relax.js";
export { checkOutput, type SchemaCheck } from "./validate.js";

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** JSON texts a closing walk prefers, best first (guide.ts). */
const JSON_CLOSERS = [
  '"}',
  '"]',
  '"',
  "}}",
  "}]",
  "]}",
  "]]",
  "}",
  "]",
  ",",
  ":",
  "/",
  "0",
  '""',
  "{}",
  "[]",
  "null",
  "true",
  "false",
  "{",
  "[",
];
/**
 * The closing tags of a tool call in the XML format, best first. Each starts with the newline of the layout, which
 * no value holds (a text parameter is one line, a JSON string holds no raw newline): a tag is taken only where it
 * closes, and inside a JSON value the JSON closers follow.
 */
const XML_CLOSERS = ["\n</parameter>", "\n</function>", "\n</tool_call>"];

/** The reasoning block's closing text in Qwen templates. */
export const THINK_END = "</think>";

/** A guided request, checked: what to compile (if anything) and the reasoning settings. */
export interface GuidePlan {
  source: GrammarSource | undefined;
  reasoning: boolean;
  thinkingBudget: number | undefined;
  /** a best-effort schema (strict: false) that was relaxed: the output is checked against `schema` when done */
  validation?: { schema: unknown; relaxed: RelaxedKeyword[] };
}

/**
 * Checks the guided-decoding fields of a request (synchronously: schema keywords, tool names, the
 * repetitions against `limits`, budget), or returns undefined when the request is not guided.
 */
export function planGuide(
  params: { constraint?: unknown; reasoning?: unknown; thinkingBudget?: unknown },
  limits: GrammarLimits = DEFAULT_GRAMMAR_LIMITS,
): GuidePlan | undefined {
  const { constraint, reasoning, thinkingBudget } = params;
  if (constraint === undefined && thinkingBudget === undefined) return undefined;
  if (reasoning !== undefined && typeof reasoning !== "boolean") {
    throw new ConstraintError("CONSTRAINT_BAD_SPEC", `reasoning must be a boolean, got ${JSON.stringify(reasoning)}`, {
      field: "reasoning",
    });
  }
  if (thinkingBudget !== undefined) {
    if (typeof thinkingBudget !== "number" || !Number.isSafeInteger(thinkingBudget) || thinkingBudget < 0) {
      throw new ConstraintError("CONSTRAINT_BAD_SPEC", `thinkingBudget must be an integer >= 0, got ${JSON.stringify(thinkingBudget)}`, {
        field: "thinkingBudget",
      });
    }
    if (reasoning !== true) {
      throw new ConstraintError(
        "CONSTRAINT_BAD_SPEC",
        "thinkingBudget needs reasoning: true (the prompt must end inside an open <think> block)",
        { field: "thinkingBudget" },
      );
    }
  }
  // a schema that is not strict is relaxed where it cannot be enforced, and its output checked when done (relax.ts)
  let spec = constraint;
  let validation: GuidePlan["validation"];
  if (isRecord(constraint) && constraint["type"] === "json_schema" && constraint["strict"] === false && isRecord(constraint["schema"])) {
    const relaxedSchema = relaxJsonSchema(constraint["schema"], "constraint.schema", limits);
    if (relaxedSchema.relaxed.length > 0) {
      spec = { ...constraint, schema: relaxedSchema.relaxedSchema };
      validation = { schema: relaxedSchema.normalized, relaxed: relaxedSchema.relaxed };
    }
  }
  return {
    source: spec === undefined ? undefined : resolveConstraint(spec, "constraint", limits),
    reasoning: reasoning === true,
    thinkingBudget: thinkingBudget as number | undefined,
    ...(validation === undefined ? {} : { validation }),
  };
}

/** The engine's side of guided decoding: one compiler (and grammar worker) per tokenizer, created on first use. */
export class GuidedDecoding {
  private compiler: ConstraintCompiler | undefined;
  private thinkEndIds: number[] | undefined;
  private closerIds: { json: number[][]; xml: number[][] } | undefined;

  constructor(
    private readonly tokenizer: Tokenizer | undefined,
    private readonly limits: GrammarLimits = DEFAULT_GRAMMAR_LIMITS,
  ) {}

  private need(): { tokenizer: Tokenizer; compiler: ConstraintCompiler } {
    if (!this.tokenizer) {
      throw new ConstraintError("CONSTRAINT_NO_TOKENIZER", "constrained decoding needs the model's tokenizer, which this model lacks", {
        field: "constraint",
      });
    }
    this.compiler ??= new ConstraintCompiler(this.tokenizer, this.limits);
    return { tokenizer: this.tokenizer, compiler: this.compiler };
  }

  /** Throws now (not from the stream) when `plan` needs a tokenizer this model lacks. */
  checkTokenizer(plan: GuidePlan): void {
    if (plan.source) this.need();
    else if (!this.tokenizer) {
      throw new ConstraintError("CONSTRAINT_NO_TOKENIZER", "a thinking budget needs the model's tokenizer (to write </think>)", {
        field: "thinkingBudget",
      });
    }
  }

  /** Ends the grammar worker, if one was started (the engine's dispose). */
  async dispose(): Promise<void> {
    const compiler = this.compiler;
    this.compiler = undefined;
    await compiler?.dispose();
  }

  /** The token ids of `</think>` (one added token in Qwen3 / Qwen3.5 vocabularies). */
  private thinkEnd(tokenizer: Tokenizer): number[] {
    this.thinkEndIds ??= tokenizer.encode(THINK_END, { parseSpecial: true });
    return this.thinkEndIds;
  }

  /**
   * The token sequences a closing walk prefers (guide.ts), best first: for JSON those that close a string (and its
   * container), a container; a separator; then the shortest values. A tool call in the XML format closes its
   * parameter first (a string parameter's text may hold any JSON character). Texts of one token only for JSON.
   */
  private closers(tokenizer: Tokenizer, xml: boolean, source?: GrammarSource): number[][] {
    this.closerIds ??= {
      json: JSON_CLOSERS.map((text) => tokenizer.encode(text)).filter((ids) => ids.length === 1),
      xml: XML_CLOSERS.map((text) => tokenizer.encode(text)).filter((ids) => ids.length > 0),
    };
    if (xml) return [...this.closerIds.xml, ...this.closerIds.json];
    // an object that takes other keys: its listed keys first, where any closer that opens a string (`"}`, `"`)
    // would begin another key, and the walk would write other keys without end
    const keys = source?.kind === "json_schema" ? (source.keys ?? []) : [];
    if (keys.length === 0) return this.closerIds.json;
    // (each with the space of `", "` before it too: a separator's comma may be a token of its own)
    const named = keys.flatMap((key) => [JSON.stringify(key), ` ${JSON.stringify(key)}`]);
    return [...named.map((text) => tokenizer.encode(text, { addSpecial: false })), ...this.closerIds.json];
  }

  /** Compiles `spec` (cached), so that a bad schema fails before a response starts. */
  async check(spec: ConstraintSpec): Promise<void> {
    const source = planGuide({ constraint: spec }, this.limits)!.source!;
    await this.need().compiler.check(source, "constraint");
  }

  /** A guide for one sequence (compiles its constraint first). */
  async guide(plan: GuidePlan): Promise<DecodeGuide> {
    const { tokenizer, compiler } = plan.source ? this.need() : { tokenizer: this.tokenizer, compiler: undefined };
    if (!tokenizer) {
      throw new ConstraintError("CONSTRAINT_NO_TOKENIZER", "a thinking budget needs the model's tokenizer (to write </think>)", {
        field: "thinkingBudget",
      });
    }
    const made = plan.source && compiler ? await compiler.matcher(plan.source, "constraint") : undefined;
    return new DecodeGuide({
      matcher: made?.matcher,
      ...(made ? { release: made.release } : {}),
      reasoning: plan.reasoning,
      thinkingBudget: plan.thinkingBudget,
      thinkEnd: this.thinkEnd(tokenizer),
      eogIds: tokenizer.eogIds,
      closers: this.closers(tokenizer, plan.source?.kind === "structural_tag" && plan.source.callFormat === "xml", plan.source),
    });
  }
}
