/**
 * The AI SDK's prompt (LanguageModelV3Prompt) as the engine's chat messages, which the model's own chat
 * template renders (`encodeChat`: caller text never becomes a special token).
 *
 * - system: a system message; user: its text parts joined; assistant: text as content, reasoning parts as
 *   `reasoning_content`, tool calls as `tool_calls` (arguments as the JSON value the SDK holds);
 * - tool: one `tool` message per result (`tool_call_id`, `name`, the output as text: JSON outputs as JSON).
 * - user file parts with an image media type (PNG, JPEG, WebP, GIF, or `image/*`) are images, in their place
 *   among the message's text (`encodeMultimodalChat` puts them between the vision markers); their data is bytes,
 *   base64 or a data URL, or a URL object that `images.ts` fetches when the model's settings allow it. Other
 *   file parts (audio, documents, other image types) and files in assistant messages or tool results are
 *   refused. Tool approval responses are for provider-executed tools, which keepquant has none of: they are
 *   skipped.
 */
import type { LanguageModelV3FilePart, LanguageModelV3Prompt, LanguageModelV3ToolResultOutput } from "@ai-sdk/provider";
import { InvalidPromptError, UnsupportedFunctionalityError } from "@ai-sdk/provider";
import type { ChatImagePart, ChatTextPart, ChatToolCall, MultimodalChatMessage } from "@keepquant/engine";

/** Image media types the engine decodes (`image/*`: any of them, the format read from the bytes). */
export const IMAGE_MEDIA_TYPES: readonly string[] = ["image/png", "image/jpeg", "image/webp", "image/gif", "image/*"];

/**
 * An image of the prompt: where it is (for errors), and its bytes, or the URL they are fetched from (the part's
 * `image` is then empty until `images.ts` fills it).
 */
export interface PromptImage {
  where: string;
  mediaType: string;
  part: ChatImagePart;
  url: URL | undefined;
}

/** The engine's chat messages of a prompt and its images, in prompt order. */
export interface ConvertedPrompt {
  messages: MultimodalChatMessage[];
  images: PromptImage[];
}

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
    functionality: `file parts of type ${mediaType}`,
    message: `keepquant reads text and images (${IMAGE_MEDIA_TYPES.join(", ")}) in user messages: ${where} is a file part of type ${mediaType}; pass its content as text`,
  });
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const DATA_URL = /^data:([^;,]*)((?:;[^;,]*)*),(.*)$/s;

/** Base64 text as bytes; InvalidPromptError naming the part when it is not base64. */
function base64Bytes(text: string, where: string, prompt: unknown): Uint8Array {
  const compact = text.replace(/\s+/g, "");
  if (compact.length % 4 === 1 || !BASE64.test(compact)) {
    throw new InvalidPromptError({ prompt, message: `keepquant: ${where}: the image data is neither base64 nor a data URL` });
  }
  return new Uint8Array(Buffer.from(compact, "base64"));
}

/** An image file part's bytes (undefined for a URL object: fetched later, if the settings allow). */
function imageBytes(part: LanguageModelV3FilePart, where: string, prompt: unknown): Uint8Array | undefined {
  const data = part.data;
  if (data instanceof Uint8Array) return data;
  if (data instanceof URL) {
    if (data.protocol !== "data:") return undefined;
    return imageBytes({ ...part, data: data.href }, where, prompt);
  }
  if (typeof data !== "string")
    throw new InvalidPromptError({ prompt, message: `keepquant: ${where}: the image data is not bytes, base64 or a URL` });
  const dataUrl = DATA_URL.exec(data);
  if (!dataUrl) return base64Bytes(data, where, prompt);
  const parameters = dataUrl[2]!.split(";");
  if (parameters.includes("base64")) return base64Bytes(dataUrl[3]!, where, prompt);
  return new Uint8Array(Buffer.from(decodeURIComponent(dataUrl[3]!), "latin1"));
}

/** The engine's messages and the prompt's images (see the module comment). */
export function convertPrompt(prompt: LanguageModelV3Prompt): MultimodalChatMessage[] {
  return convertPromptWithImages(prompt).messages;
}

export function convertPromptWithImages(prompt: LanguageModelV3Prompt): ConvertedPrompt {
  if (!Array.isArray(prompt) || prompt.length === 0) {
    throw new InvalidPromptError({ prompt, message: "keepquant: the prompt has no messages" });
  }
  const messages: MultimodalChatMessage[] = [];
  const images: PromptImage[] = [];
  prompt.forEach((message, index) => {
    const where = `prompt[${index}] (${message.role})`;
    switch (message.role) {
      case "system":
        messages.push({ role: "system", content: message.content });
        return;
      case "user": {
        const parts: (ChatTextPart | ChatImagePart)[] = [];
        message.content.forEach((part, partIndex) => {
          if (part.type !== "file") {
            const last = parts.at(-1);
            if (last?.type === "text") last.text += part.text;
            else parts.push({ type: "text", text: part.text });
            return;
          }
          const partWhere = `${where} content[${partIndex}]`;
          const mediaType = part.mediaType.toLowerCase();
          if (!IMAGE_MEDIA_TYPES.includes(mediaType)) throw filePartError(partWhere, part.mediaType);
          const bytes = imageBytes(part, partWhere, prompt);
          const image: ChatImagePart = { type: "image", image: bytes ?? new Uint8Array(0) };
          parts.push(image);
          images.push({ where: partWhere, mediaType, part: image, url: bytes === undefined ? (part.data as URL) : undefined });
        });
        const text = parts.every((p) => p.type === "text") ? parts.map((p) => (p as ChatTextPart).text).join("") : undefined;
        messages.push({ role: "user", content: text ?? parts });
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
        const out: MultimodalChatMessage = { role: "assistant", content };
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
  return { messages, images };
}
