/**
 * A ConstraintSpec checked once and turned into what the grammar engine compiles: a JSON Schema,
 * an EBNF grammar, or an xgrammar structural tag (tool calls in the model's own format).
 */
import { ConstraintError } from "./errors.js";
import { addEbnfRepetitions, addSchemaRepetitions, type GrammarLimits, RepetitionBudget } from "./limits.js";
import { placeOpenObjects } from "./open-objects.js";
import { placeIntegerRanges, type RangePlaces, rangePlaces } from "./integer-ranges.js";
import { checkJsonSchema } from "./schema.js";

/** Longest EBNF grammar accepted (characters). */
export const MAX_EBNF_LENGTH = 1 << 20;
/** Most tools in one tool_call constraint. */
export const MAX_CONSTRAINT_TOOLS = 128;

/**
 * `ranges`: placeholder literals of bounded integers (integer-ranges.ts) -> the EBNF of their exact range, put in
 * by the grammar worker where the converter wrote the placeholder. `keys`: the listed properties of the objects that
 * take other keys too (open-objects.ts), which a closing walk writes before any other key.
 */
export type GrammarSource =
  | { kind: "json_schema"; schema: string; strictMode: boolean; ranges?: Record<string, string>; keys?: readonly string[] }
  | { kind: "ebnf"; ebnf: string }
  /** tool calls: `callFormat` is the calls' format (an XML call's parameters close with tags) */
  | { kind: "structural_tag"; tag: Record<string, unknown>; callFormat: "xml" | "json"; ranges?: Record<string, string> };

/** The text after which a call's arguments start and the text that closes it, per format. */
function callTag(format: "xml" | "json", name: string, schema: Record<string, unknown>): Record<string, unknown> {
  if (format === "xml") {
    // <tool_call>\n<function=NAME>\n<parameter=ARG>\nvalue\n</parameter>\n</function>\n</tool_call>
    // (each parameter brings the newline before it: grammar-worker.ts's xmlParametersGrammar)
    return {
      type: "tag",
      begin: `<tool_call>\n<function=${name}>`,
      content: { type: "qwen_xml_parameter", json_schema: schema },
      end: "\n</function>\n</tool_call>",
    };
  }
  // <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
  return {
    type: "tag",
    begin: `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `,
    content: { type: "json_schema", json_schema: schema },
    end: "}\n</tool_call>",
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const ANY_OBJECT: Record<string, unknown> = { type: "object" };

/** Throws CONSTRAINT_UNSUPPORTED_KEYWORD for the first `pattern` in a (checked) schema. */
function refusePatterns(schema: unknown, field: string): void {
  const stack: { value: unknown; path: string }[] = [{ value: schema, path: "" }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (Array.isArray(value)) value.forEach((item, i) => stack.push({ value: item, path: `${path}/${i}` }));
    if (!isObject(value)) continue;
    if (typeof value["pattern"] === "string") {
      throw new ConstraintError(
        "CONSTRAINT_UNSUPPORTED_KEYWORD",
        `${field}: keyword "pattern" at ${path === "" ? "the root" : path} cannot be enforced by constrained decoding in the XML tool-call format (it is in the JSON format); remove it or use the JSON format`,
        { field, path, keyword: "pattern" },
      );
    }
    for (const [key, child] of Object.entries(value)) {
      if (key !== "enum" && key !== "const" && key !== "default" && key !== "examples")
        stack.push({ value: child, path: `${path}/${key}` });
    }
  }
}

/**
 * Checks `spec` (throws ConstraintError naming the field) and returns what to compile. `field` is
 * the parameter's name in errors ("constraint" for the engine API). With `limits`, a constraint whose
 * repetitions are past them is refused here, before any compile (CONSTRAINT_TOO_COMPLEX).
 */
export function resolveConstraint(
  spec: unknown,
  field = "constraint",
  limits?: Pick<GrammarLimits, "maxRepetition" | "maxRepetitionSum">,
): GrammarSource {
  const budget = limits ? new RepetitionBudget(limits) : undefined;
  const badSpec = (at: string, message: string): never => {
    throw new ConstraintError("CONSTRAINT_BAD_SPEC", `${at}: ${message}`, { field: at });
  };
  if (!isObject(spec)) badSpec(field, `must be an object such as { type: "json_schema", schema }, got ${JSON.stringify(spec)}`);
  const s = spec as Record<string, unknown>;
  switch (s["type"]) {
    case "json_schema": {
      const schema = s["schema"];
      if (!isObject(schema) && typeof schema !== "boolean") badSpec(`${field}.schema`, "must be a JSON Schema object");
      const normalized = checkJsonSchema(schema, `${field}.schema`);
      if (budget) addSchemaRepetitions(normalized, `${field}.schema`, budget);
      if (s["strict"] !== undefined && typeof s["strict"] !== "boolean") badSpec(`${field}.strict`, "must be a boolean");
      if (s["openObjects"] !== undefined && typeof s["openObjects"] !== "boolean") badSpec(`${field}.openObjects`, "must be a boolean");
      if (s["openObjects"] === true && s["strict"] === true)
        badSpec(`${field}.openObjects`, "goes with a schema that is not strict (strict objects hold their listed properties only)");
      const places = rangePlaces(JSON.stringify(normalized) ?? "");
      // objects hold their listed properties only unless openObjects asks for JSON Schema's own semantics (open-objects.ts)
      const keys = new Set<string>();
      const placed = placeIntegerRanges(placeOpenObjects(normalized, places, s["openObjects"] !== true, keys), places);
      return {
        kind: "json_schema",
        schema: JSON.stringify(placed),
        strictMode: s["strict"] !== false,
        ...(Object.keys(places.rules).length > 0 ? { ranges: places.rules } : {}),
        ...(keys.size > 0 ? { keys: [...keys] } : {}),
      };
    }
    case "json_object":
      return { kind: "json_schema", schema: JSON.stringify(ANY_OBJECT), strictMode: false };
    case "grammar": {
      const ebnf = s["ebnf"];
      if (typeof ebnf !== "string" || ebnf.trim() === "") badSpec(`${field}.ebnf`, "must be a non-empty EBNF grammar string");
      if ((ebnf as string).length > MAX_EBNF_LENGTH) {
        badSpec(`${field}.ebnf`, `has ${(ebnf as string).length} characters; at most ${MAX_EBNF_LENGTH}`);
      }
      if (budget) addEbnfRepetitions(ebnf as string, `${field}.ebnf`, budget);
      return { kind: "ebnf", ebnf: ebnf as string };
    }
    case "tool_call": {
      const places = rangePlaces(JSON.stringify(s["tools"]) ?? "");
      const tag = toolCallTag(s, field, budget, places);
      return {
        kind: "structural_tag",
        tag,
        callFormat: s["format"] as "xml" | "json",
        ...(Object.keys(places.rules).length > 0 ? { ranges: places.rules } : {}),
      };
    }
    default:
      return badSpec(`${field}.type`, `must be "json_schema", "json_object", "tool_call" or "grammar", got ${JSON.stringify(s["type"])}`);
  }
}

function toolCallTag(
  s: Record<string, unknown>,
  field: string,
  budget: RepetitionBudget | undefined,
  places: RangePlaces,
): Record<string, unknown> {
  const badSpec = (at: string, message: string): never => {
    throw new ConstraintError("CONSTRAINT_BAD_SPEC", `${at}: ${message}`, { field: at });
  };
  const format = s["format"];
  if (format !== "xml" && format !== "json") badSpec(`${field}.format`, `must be "xml" or "json", got ${JSON.stringify(format)}`);
  const tools = s["tools"];
  if (!Array.isArray(tools) || tools.length === 0) badSpec(`${field}.tools`, "must be a non-empty array of tools");
  if ((tools as unknown[]).length > MAX_CONSTRAINT_TOOLS) {
    badSpec(`${field}.tools`, `has ${(tools as unknown[]).length} tools; at most ${MAX_CONSTRAINT_TOOLS}`);
  }
  const choice = s["choice"];
  const named = isObject(choice) ? choice["name"] : undefined;
  if (choice !== "required" && choice !== "auto" && typeof named !== "string") {
    badSpec(`${field}.choice`, `must be "required", "auto" or { name }, got ${JSON.stringify(choice)}`);
  }
  const names = new Set<string>();
  const tags: Record<string, unknown>[] = [];
  (tools as unknown[]).forEach((tool, i) => {
    const at = `${field}.tools[${i}]`;
    if (!isObject(tool)) badSpec(at, "must be { name, parameters?, strict? }");
    const t = tool as Record<string, unknown>;
    const name = t["name"];
    if (typeof name !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(name))
      badSpec(`${at}.name`, "must be 1-64 characters of a-z, A-Z, 0-9, _ . -");
    if (names.has(name as string)) badSpec(`${at}.name`, `tool ${JSON.stringify(name)} is listed twice`);
    names.add(name as string);
    const parameters = t["parameters"];
    if (parameters !== undefined && !isObject(parameters)) badSpec(`${at}.parameters`, "must be a JSON Schema object");
    if (t["strict"] !== undefined && typeof t["strict"] !== "boolean") badSpec(`${at}.strict`, "must be a boolean");
    // under "auto" only strict tools have their arguments checked; a forced call always does
    const enforce = choice !== "auto" || t["strict"] === true;
    let normalized: unknown;
    if (enforce && parameters !== undefined) {
      normalized = checkJsonSchema(parameters, `${at}.parameters`);
      // the XML format's parameters are xgrammar's own, which does not enforce a pattern exactly
      if (format === "xml") refusePatterns(normalized, `${at}.parameters`);
      // only the tools the grammar includes count (a named choice compiles that tool alone)
      if (budget && (named === undefined || named === name)) addSchemaRepetitions(normalized, `${at}.parameters`, budget);
    }
    // bounded integers get exact ranges in the JSON format (the XML format's parameters are xgrammar's own)
    const schema =
      normalized === undefined
        ? ANY_OBJECT
        : format === "json"
          ? (placeIntegerRanges(placeOpenObjects(normalized, places, true), places) as Record<string, unknown>)
          : (placeOpenObjects(normalized, places, true) as Record<string, unknown>);
    if (named === undefined || named === name) tags.push(callTag(format as "xml" | "json", name as string, schema));
  });
  if (typeof named === "string" && !names.has(named)) {
    throw new ConstraintError(
      "CONSTRAINT_UNKNOWN_TOOL",
      `${field}.choice names tool ${JSON.stringify(named)}, which is not among the tools (${[...names].join(", ")})`,
      { field: `${field}.choice` },
    );
  }
  let format_: Record<string, unknown>;
  if (typeof named === "string") format_ = tags[0]!;
  else if (choice === "required") format_ = { type: "tags_with_separator", tags, separator: "\n", at_least_one: true };
  else format_ = { type: "triggered_tags", triggers: ["<tool_call>"], tags };
  return { type: "structural_tag", format: format_ };
}
