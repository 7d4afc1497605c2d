/**
 * The AI SDK's structured-output and tool-choice settings as the engine's constrained decoding
 * (`GenerateParams.constraint`), and the engine's ConstraintError as the SDK's error types.
 *
 * - `responseFormat: { type: "json", schema }` (generateObject, streamObject, Output.object): `json_schema`, best
 *   effort unless `providerOptions.keepquant.strictJsonSchema`; without a schema: `json_object`.
 * - `toolChoice: "required"`: `tool_call` with choice "required" (one or more calls, arguments valid for each
 *   tool's inputSchema); `{ type: "tool", toolName }`: exactly one call of that tool; `"auto"` with a tool
 *   marked `strict`: free text or calls, the strict tools' arguments checked. Calls are in the model's own
 *   format (`toolCallFormatOf(template)`: XML for Qwen3.5 templates, JSON for Qwen3 / ChatML ones).
 * - With a reasoning prompt (an open `<think>`), the constraint applies after `</think>`.
 */
import type { LanguageModelV3CallOptions, LanguageModelV3FunctionTool } from "@ai-sdk/provider";
import { InvalidArgumentError, UnsupportedFunctionalityError } from "@ai-sdk/provider";
import { ConstraintError, type ConstraintSpec, type ToolCallFormat } from "@keepquant/engine";
import { PROVIDER_NAME } from "./settings.js";

/** What a call asks of the output, as an engine constraint (undefined: free text). */
export function constraintOf(
  options: Pick<LanguageModelV3CallOptions, "responseFormat" | "toolChoice">,
  tools: readonly LanguageModelV3FunctionTool[],
  format: ToolCallFormat,
  strictJsonSchema = false,
): ConstraintSpec | undefined {
  const responseFormat = options.responseFormat;
  const choice = options.toolChoice ?? { type: "auto" };
  if (responseFormat?.type === "json") {
    if (tools.length > 0 && (choice.type === "required" || choice.type === "tool")) {
      throw new UnsupportedFunctionalityError({
        functionality: "JSON output with a forced tool call",
        message: `${PROVIDER_NAME}: a call constrains its output to either a JSON document or tool calls, not both`,
      });
    }
    return responseFormat.schema === undefined
      ? { type: "json_object" }
      : { type: "json_schema", schema: responseFormat.schema as Record<string, unknown>, strict: strictJsonSchema };
  }
  if (tools.length === 0 || choice.type === "none") return undefined;
  const specTools = tools.map((tool) => ({
    name: tool.name,
    parameters: tool.inputSchema as Record<string, unknown>,
    ...(tool.strict === undefined ? {} : { strict: tool.strict }),
  }));
  if (choice.type === "required") return { type: "tool_call", format, tools: specTools, choice: "required" };
  if (choice.type === "tool") {
    if (!tools.some((tool) => tool.name === choice.toolName)) {
      throw new InvalidArgumentError({
        argument: "toolChoice",
        message: `${PROVIDER_NAME}: toolChoice names the tool ${JSON.stringify(choice.toolName)}, which is not among the call's tools (${tools.map((t) => t.name).join(", ")})`,
      });
    }
    return { type: "tool_call", format, tools: specTools, choice: { name: choice.toolName } };
  }
  // auto: only strict tools have their arguments checked; without one the output is free
  return tools.some((tool) => tool.strict === true) ? { type: "tool_call", format, tools: specTools, choice: "auto" } : undefined;
}

/** The SDK's name of a constraint field: `constraint.schema` is `responseFormat.schema`, `constraint.tools[i]...` the tool's inputSchema. */
function argumentOf(field: string | undefined, tools: readonly LanguageModelV3FunctionTool[]): string {
  if (field === undefined) return "responseFormat";
  if (field.startsWith("constraint.schema")) return `responseFormat.schema${field.slice("constraint.schema".length)}`;
  const tool = /^constraint\.tools\[(\d+)\](?:\.parameters)?(.*)$/.exec(field);
  if (tool) return `tools.${tools[Number(tool[1])]?.name ?? tool[1]}.inputSchema${tool[2]}`;
  if (field === "thinkingBudget") return `providerOptions.${PROVIDER_NAME}.thinkingBudget`;
  if (field.startsWith("constraint.choice")) return "toolChoice";
  return field;
}

/** A ConstraintError as the SDK's error: a bad schema or tool choice is InvalidArgumentError, a keyword the engine cannot enforce UnsupportedFunctionalityError. */
export function constraintError(error: unknown, tools: readonly LanguageModelV3FunctionTool[]): unknown {
  if (!ConstraintError.isInstance(error)) return error;
  const argument = argumentOf(error.field, tools);
  const where = error.path === undefined || error.path === "" ? argument : `${argument} at ${error.path}`;
  switch (error.code) {
    case "CONSTRAINT_UNSUPPORTED_KEYWORD":
      return Object.defineProperty(
        new UnsupportedFunctionalityError({
          functionality: `JSON Schema keyword ${JSON.stringify(error.keyword)}`,
          message: `${PROVIDER_NAME}: ${where}: ${error.message}`,
        }),
        "cause",
        { value: error },
      );
    case "CONSTRAINT_ENGINE_UNAVAILABLE":
    case "CONSTRAINT_NO_TOKENIZER":
      return Object.defineProperty(
        new UnsupportedFunctionalityError({ functionality: "constrained decoding", message: `${PROVIDER_NAME}: ${error.message}` }),
        "cause",
        { value: error },
      );
    default:
      return new InvalidArgumentError({ argument, message: `${PROVIDER_NAME}: ${where}: ${error.message}`, cause: error });
  }
}
