/**
 * Which tool-call format a chat template teaches the model.
 *
 * - `xml` (Qwen3.5 / Qwen3.6 templates):
 *   `<tool_call>\n<function=NAME>\n<parameter=ARG>\nvalue\n</parameter>\n</function>\n</tool_call>`
 * - `json` (Qwen2.5 / Qwen3 templates): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
 *
 * The output parser and the constrained decoder both take the format from here, so a model is
 * parsed and constrained in the format its own template asks for.
 */
export type ToolCallFormat = "xml" | "json";

/**
 * The format `template` teaches: XML when it writes `<function=` or `<parameter=` blocks, JSON
 * otherwise. No template (undefined or "") means the built-in QWEN35_TEMPLATE renders the chat: XML.
 */
export function toolCallFormatOf(template: string | undefined): ToolCallFormat {
  if (template === undefined || template === "") return "xml";
  return /<function=|<parameter=/.test(template) ? "xml" : "json";
}
