/**
 * Chat prompts: renders a GGUF's `tokenizer.chat_template` (Jinja) with @huggingface/jinja, or the
 * built-in Qwen3.5-style template (QWEN35_TEMPLATE) when the file has none. The library provides
 * `raise_exception` and `strftime_now`.
 */
import { Template } from "@huggingface/jinja";
import { TokenizerError } from "../tokenizer/errors.js";
import { QWEN35_TEMPLATE } from "./templates.js";

export interface ChatToolCall {
  type?: "function";
  id?: string;
  function: { name: string; arguments: unknown };
}

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | (string & {});
  content: string;
  /** Assistant tool calls (templates render them as `<tool_call>` blocks). */
  tool_calls?: ChatToolCall[];
  /** Tool result: the call it answers / the tool's name. */
  tool_call_id?: string;
  name?: string;
  /** An assistant turn's thinking, for templates that render it. */
  reasoning_content?: string;
}

export interface RenderChatOptions {
  /** End with the assistant's opening so the model answers. Default true. */
  addGenerationPrompt?: boolean;
  /** Passed as `enable_thinking` only when set (templates test `enable_thinking is defined`). */
  enableThinking?: boolean;
  /** `bos_token` / `eos_token` variables (token texts). Default "". */
  bosToken?: string;
  eosToken?: string;
  /** Tool (function) definitions, passed as `tools`. */
  tools?: readonly unknown[];
  /**
   * Further template variables (a request's `chat_template_kwargs`: `preserve_thinking`,
   * `reasoning_effort`, ...). They cannot replace `messages`, `tools`, `add_generation_prompt`,
   * `bos_token` or `eos_token`, which are set from the other options.
   */
  variables?: Record<string, unknown>;
}

/** Parsed templates by source (a GGUF usually has one; parsing costs ~1 ms). */
const TEMPLATE_CACHE_LIMIT = 16;
const templateCache = new Map<string, Template>();

function parseTemplate(source: string): Template {
  let template = templateCache.get(source);
  if (!template) {
    try {
      template = new Template(source);
    } catch (error) {
      throw new TokenizerError("CHAT_TEMPLATE_ERROR", `chat template does not parse: ${(error as Error).message}`, {
        field: "tokenizer.chat_template",
        cause: error,
      });
    }
    if (templateCache.size >= TEMPLATE_CACHE_LIMIT) templateCache.delete(templateCache.keys().next().value!);
    templateCache.set(source, template);
  }
  return template;
}

/**
 * Renders `messages` with `template` (a Jinja chat template; undefined or "" = the built-in
 * QWEN35_TEMPLATE).
 * Returns the prompt text; tokenize it with `parseSpecial: true` so `<|im_start|>` and friends
 * become their special tokens.
 */
export function renderChat(template: string | undefined, messages: readonly ChatMessage[], options: RenderChatOptions = {}): string {
  const source = template && template.length > 0 ? template : QWEN35_TEMPLATE;
  const variables: Record<string, unknown> = {
    ...options.variables,
    messages: messages.map((message) => ({ ...message })),
    add_generation_prompt: options.addGenerationPrompt ?? true,
    bos_token: options.bosToken ?? "",
    eos_token: options.eosToken ?? "",
  };
  if (options.enableThinking !== undefined) variables["enable_thinking"] = options.enableThinking;
  if (options.tools !== undefined) variables["tools"] = options.tools;
  try {
    return parseTemplate(source).render(variables);
  } catch (error) {
    if (TokenizerError.isInstance(error)) throw error;
    throw new TokenizerError("CHAT_TEMPLATE_ERROR", `chat template failed to render: ${(error as Error).message}`, {
      field: "tokenizer.chat_template",
      cause: error,
    });
  }
}

/** What renderChatFor needs of a tokenizer. */
export interface ChatTokenizer {
  readonly chatTemplate: string | undefined;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  tokenText(id: number): string;
}

/** Renders with the tokenizer's own template (the built-in QWEN35_TEMPLATE when absent) and its BOS/EOS texts. */
export function renderChatFor(
  tokenizer: ChatTokenizer,
  messages: readonly ChatMessage[],
  options: Omit<RenderChatOptions, "bosToken" | "eosToken"> = {},
): string {
  return renderChat(tokenizer.chatTemplate, messages, {
    ...options,
    bosToken: tokenizer.bosId === undefined ? "" : tokenizer.tokenText(tokenizer.bosId),
    eosToken: tokenizer.eosId === undefined ? "" : tokenizer.tokenText(tokenizer.eosId),
  });
}
