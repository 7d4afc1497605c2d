/**
 * The AI SDK's prompt (LanguageModelV3Prompt) as the engine's chat messages, which the model's own chat
 * template renders (`encodeChat`: caller text never becomes a special token).
 *
 * - system: a system message; user: its text parts joined; assistant: text as content, reasoning parts as
 *   `reasoning_content`, tool calls as `tool_calls` (arguments as the JSON value the SDK holds);
 * - tool: one `tool` message per result (`tool_call_id`, `name`, the output as text: JSON outputs as JSON).
 * - File parts (images, audio, documents) are refused: the model reads text only. Tool approval
 *   responses are for provider-executed tools, which keepquant has none of: they are skipped.
 */
import type { LanguageModelV3Prompt, LanguageModelV3ToolResultOutput } from "@ai-sdk/provider";
import { InvalidPromptError, UnsupportedFunctionalityError } from "@ai-sdk/provider";
import type { ChatMessage, ChatToolCall } from "@keepquant/engine";

/** A tool result as the text the model reads. */
export function toolOutputText(output: LanguageModelV3ToolResultOutput): string {
  switch (output.type) {
    case "text":
    case "error-text":
      return output.value;
    case "json":
    case "error-json":
      return JSON.stringify(output.value);
    case "execution-denied":
      return output.reason === undefined ? "The tool call was denied." : `The tool call was denied: ${output.reason}`;
    case "content":
      return output.value
        .map((part) => {
          if (part.type === "text") return part.text;
          throw new UnsupportedFunctionalityError({
            functionality: `tool result content of type "${part.type}"`,
            message: `keepquant reads text only: a tool result part of type "${part.type}" cannot be given to the model`,
          });
        })
        .join("\n");
    default:
      throw new UnsupportedFunctionalityError({
        functionality: `tool result output ${JSON.stringify((output as { type?: unknown }).type)}`,
      });
  }
}

function filePartError(where: string, mediaType: string): UnsupportedFunctionalityError {
  return new UnsupportedFunctionalityError({
    functionality: "file parts",
    message: `keepquant reads text only: ${where} has a file part (${mediaType}); pass its content as text`,
  });
}

export function convertPrompt(prompt: LanguageModelV3Prompt): ChatMessage[] {
  if (!Array.isArray(prompt) || prompt.length === 0) {
    throw new InvalidPromptError({ prompt, message: "keepquant: the prompt has no messages" });
  }
  const messages: ChatMessage[] = [];
  prompt.forEach((message, index) => {
    const where = `prompt[${index}] (${message.role})`;
    switch (message.role) {
      case "system":
        messages.push({ role: "system", content: message.content });
        return;
      case "user": {
        const texts: string[] = [];
        for (const part of message.content) {
          if (part.type === "file") throw filePartError(where, part.mediaType);
          texts.push(part.text);
        }
        messages.push({ role: "user", content: texts.join("") });
        return;
      }
      case "assistant": {
        let content = "";
        let reasoning = "";
        const toolCalls: ChatToolCall[] = [];
        for (const part of message.content) {
          if (part.type === "text") content += part.text;
          else if (part.type === "reasoning") reasoning += part.text;
          else if (part.type === "tool-call")
            toolCalls.push({ type: "function", id: part.toolCallId, function: { name: part.toolName, arguments: part.input } });
          else if (part.type === "file") throw filePartError(where, part.mediaType);
          // a tool-result inside an assistant message is a provider-executed tool's: keepquant runs none
        }
        const out: ChatMessage = { role: "assistant", content };
        if (reasoning !== "") out.reasoning_content = reasoning;
        if (toolCalls.length > 0) out.tool_calls = toolCalls;
        messages.push(out);
        return;
      }
      case "tool":
        for (const part of message.content) {
          if (part.type !== "tool-result") continue;
          messages.push({ role: "tool", tool_call_id: part.toolCallId, name: part.toolName, content: toolOutputText(part.output) });
        }
        return;
      default:
        throw new InvalidPromptError({
          prompt,
          message: `keepquant: ${where}: unknown role ${JSON.stringify((message as { role?: unknown }).role)}`,
        });
    }
  });
  return messages;
}
