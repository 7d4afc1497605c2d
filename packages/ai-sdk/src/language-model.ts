/**
 * A keepquant model as the AI SDK's LanguageModelV3 (the specification of `ai`@6, @ai-sdk/provider@3): the
 * prompt is rendered by the model's chat template and encoded in process, the engine generates (its
 * scheduler batches concurrent calls), and the output is split into reasoning, text and tool calls by the
 * same parser the OpenAI-compatible server uses. No port, no HTTP.
 */
import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3FunctionTool,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
  SharedV3ProviderMetadata,
  SharedV3Warning,
} from "@ai-sdk/provider";
import { UnsupportedFunctionalityError } from "@ai-sdk/provider";
import {
  type ChatMessage,
  type Engine,
  encodeMultimodalChat,
  type MultimodalPrompt,
  type EncodeChatOptions,
  encodeChat,
  type GenerateParams,
  type GenerationResult,
  OutputParser,
  type OutputParserOptions,
  type ParsedOutput,
  type StopReason,
  type Tokenizer,
  toolCallFormatOf,
} from "@keepquant/engine";
import { convertPromptWithImages } from "./convert-prompt.js";
import { encodePromptImages } from "./images.js";
import type { EngineRegistry } from "./engines.js";
import { constraintError, constraintOf } from "./constraint.js";
import { abortError, callError } from "./errors.js";
import { ReasoningCounter } from "./reasoning-tokens.js";
import { newId, StreamPartWriter, warningsMetadata } from "./stream-parts.js";
import { engineOptionsOf, type KeepquantCallOptions, type KeepquantModelSettings, PROVIDER_NAME, parseCallOptions } from "./settings.js";

/** One call, ready to run: the encoded prompt, the engine's parameters and how to read the output. */
interface PreparedCall {
  engine: Engine;
  /** Token ids, or pieces of token ids and encoded images when the prompt holds images. */
  prompt: number[] | MultimodalPrompt;
  promptTokens: number;
  promptText: string;
  params: GenerateParams;
  /** The prompt ends inside an open `<think>`: the output starts with reasoning. */
  reasoning: boolean;
  /** How the output is read: reasoning first or not, which tools (their schemas type XML arguments), the call format. */
  parser: OutputParserOptions;
  /** The call's function tools (for error messages that name them). */
  functionTools: LanguageModelV3FunctionTool[];
  warnings: SharedV3Warning[];
}

/** The AI SDK's finish reason of an engine stop reason. */
export function finishReasonOf(stopReason: StopReason, toolCalls: number): LanguageModelV3FinishReason {
  if (stopReason === "max_tokens" || stopReason === "context") return { unified: "length", raw: stopReason };
  if (toolCalls > 0) return { unified: "tool-calls", raw: stopReason };
  if (stopReason === "eog" || stopReason === "stop_string") return { unified: "stop", raw: stopReason };
  return { unified: "other", raw: stopReason };
}

/** The AI SDK's usage of a generation: prompt tokens (cached ones read from the prefix cache) and output tokens (reasoning among them). */
export function usageOf(result: GenerationResult, reasoningTokens: number): LanguageModelV3Usage {
  const s = result.stats;
  return {
    inputTokens: {
      total: s.promptTokens,
      noCache: s.promptTokens - s.cachedPromptTokens,
      cacheRead: s.cachedPromptTokens,
      cacheWrite: undefined,
    },
    outputTokens: { total: s.generatedTokens, text: s.generatedTokens - reasoningTokens, reasoning: reasoningTokens },
    raw: { promptTokens: s.promptTokens, generatedTokens: s.generatedTokens, cachedPromptTokens: s.cachedPromptTokens },
  };
}

function metadataOf(result: GenerationResult): SharedV3ProviderMetadata {
  const s = result.stats;
  return {
    [PROVIDER_NAME]: {
      stopReason: result.stopReason,
      timeToFirstTokenMs: s.timeToFirstTokenMs,
      totalMs: s.totalMs,
      prefillTokensPerSecond: s.prefillTokensPerSecond,
      decodeTokensPerSecond: s.decodeTokensPerSecond,
      preemptions: s.preemptions,
      ...(s.speculative ? { speculative: { drafted: s.speculative.drafted, accepted: s.speculative.accepted } } : {}),
      ...(result.schemaCheck
        ? {
            schemaCheck: {
              valid: result.schemaCheck.valid,
              errors: result.schemaCheck.errors,
              relaxed: result.schemaCheck.relaxed.map(({ path, keyword }) => ({ path, keyword })),
            },
          }
        : {}),
    },
  };
}

/** What the call asked of the engine (the SDK's `request.body`, for telemetry and debugging). */
function requestBody(prepared: PreparedCall): Record<string, unknown> {
  const { signal: _signal, ...params } = prepared.params;
  return { prompt: prepared.promptText, promptTokens: prepared.promptTokens, ...params };
}

/** An engine failure of a prepared call as the AI SDK's error. */
function failure(error: unknown, prepared: PreparedCall, prompt: unknown): unknown {
  return constraintError(callError(error, prompt), prepared.functionTools);
}

/**
 * The token count of the leading system messages when the prompt starts with them (0 otherwise): a prefix-cache
 * point, so that other conversations with the same system prompt (and tools) skip recomputing it.
 */
function systemPrefixLength(
  tokenizer: Tokenizer,
  messages: readonly ChatMessage[],
  options: EncodeChatOptions,
  ids: readonly number[],
): number {
  let count = 0;
  while (count < messages.length && messages[count]!.role === "system") count++;
  if (count === 0 || count === messages.length) return 0;
  const head = encodeChat(tokenizer, messages.slice(0, count), { ...options, addGenerationPrompt: false }).ids;
  if (head.length === 0 || head.length >= ids.length || head.some((id, i) => ids[i] !== id)) return 0;
  return head.length;
}

/** A tokenizer whose chat template is replaced (the rest is the tokenizer's own). */
function withChatTemplate(tokenizer: Tokenizer, template: string): Tokenizer {
  return Object.create(tokenizer, { chatTemplate: { value: template, enumerable: true } }) as Tokenizer;
}

export class KeepquantLanguageModel implements LanguageModelV3 {
  readonly specificationVersion = "v3";
  readonly provider = PROVIDER_NAME;
  readonly modelId: string;
  /**
   * URLs the model takes as they are: http(s) images when the `imageUrls` setting allows fetching them; otherwise
   * none (generateText and streamText download a URL and pass its bytes).
   */
  readonly supportedUrls: Record<string, RegExp[]>;
  readonly settings: Readonly<KeepquantModelSettings>;
  private readonly registry: EngineRegistry;
  private templated: { tokenizer: Tokenizer; wrapped: Tokenizer } | undefined;

  constructor(modelId: string, settings: KeepquantModelSettings, registry: EngineRegistry) {
    this.modelId = modelId;
    this.settings = Object.freeze({ ...settings });
    this.registry = registry;
    this.supportedUrls = settings.imageUrls === undefined ? {} : { "image/*": [/^https?:\/\//] };
  }

  /** The model's engine (shared with every model of the same file and engine settings), loaded on first use. */
  engine(): Promise<Engine> {
    return this.registry.engine(this.modelId, this.settings);
  }

  private chatTokenizer(tokenizer: Tokenizer): Tokenizer {
    const template = this.settings.chatTemplate;
    if (template === undefined) return tokenizer;
    if (this.templated?.tokenizer !== tokenizer) this.templated = { tokenizer, wrapped: withChatTemplate(tokenizer, template) };
    return this.templated.wrapped;
  }

  private async prepare(options: LanguageModelV3CallOptions): Promise<PreparedCall> {
    if (options.abortSignal?.aborted) throw abortError(options.abortSignal);
    const warnings: SharedV3Warning[] = [];
    const call: KeepquantCallOptions = parseCallOptions(options.providerOptions);
    const { messages, images } = convertPromptWithImages(options.prompt);

    const functionTools = (options.tools ?? []).filter((tool) => tool.type === "function");
    for (const tool of options.tools ?? []) {
      if (tool.type === "provider")
        warnings.push({ type: "unsupported", feature: `provider tool ${tool.id}`, details: "keepquant runs no provider-executed tools" });
    }
    const toolChoice = options.toolChoice ?? { type: "auto" };
    const jsonOutput = options.responseFormat?.type === "json";
    // one constraint per call: with JSON output (a forced tool call then is refused by constraintOf) no tools are offered
    if (jsonOutput && functionTools.length > 0 && toolChoice.type === "auto") {
      warnings.push({
        type: "unsupported",
        feature: "tools with JSON output",
        details: "the output is the JSON document: no tools are offered",
      });
    }
    const useTools = functionTools.length > 0 && toolChoice.type !== "none" && !jsonOutput;
    const engine = await this.engine();
    if (!engine.tokenizer) {
      throw new UnsupportedFunctionalityError({
        functionality: "models without a tokenizer",
        message: `keepquant: the model ${this.modelId} has no usable tokenizer, so a chat prompt cannot be encoded`,
      });
    }
    const templateTools = functionTools.map((tool) => ({
      type: "function",
      function: {
        name: tool.name,
        ...(tool.description === undefined ? {} : { description: tool.description }),
        parameters: tool.inputSchema,
      },
    }));
    const tokenizer = this.chatTokenizer(engine.tokenizer);
    const format = toolCallFormatOf(tokenizer.chatTemplate);
    const constraint = constraintOf(options, functionTools, format, call.strictJsonSchema === true);
    if (constraint) {
      // compiled now (and cached), so that a schema the engine refuses fails before any output
      try {
        await engine.prepareConstraint(constraint);
      } catch (error) {
        throw constraintError(error, functionTools);
      }
    }
    const chatOptions: EncodeChatOptions = {
      ...(useTools ? { tools: templateTools } : {}),
      ...(call.thinking === undefined ? {} : { enableThinking: call.thinking }),
    };
    const encodedImages = await encodePromptImages(engine, this.modelId, images, {
      imageUrls: this.settings.imageUrls,
      prompt: options.prompt,
      signal: options.abortSignal,
    });
    let encoded: { prompt: number[] | MultimodalPrompt; promptTokens: number; text: string };
    try {
      if (images.length === 0) {
        const chat = encodeChat(tokenizer, messages as ChatMessage[], chatOptions);
        encoded = { prompt: chat.ids, promptTokens: chat.ids.length, text: chat.text };
      } else {
        const chat = encodeMultimodalChat(tokenizer, messages, chatOptions);
        const pieces = chat.pieces.map((piece) => (Array.isArray(piece) ? piece : encodedImages.get(chat.images[piece.image]!)!));
        const promptTokens = pieces.reduce((sum, piece) => sum + (Array.isArray(piece) ? piece.length : piece.tokens), 0);
        encoded = { prompt: { pieces }, promptTokens, text: chat.text };
      }
    } catch (error) {
      throw callError(error, options.prompt);
    }

    const params: GenerateParams = {};
    if (options.maxOutputTokens !== undefined) params.maxTokens = options.maxOutputTokens;
    if (options.temperature !== undefined) params.temperature = options.temperature;
    if (options.topK !== undefined) params.topK = options.topK;
    if (options.topP !== undefined) params.topP = options.topP;
    if (options.seed !== undefined) params.seed = options.seed;
    if (options.presencePenalty !== undefined) params.presencePenalty = options.presencePenalty;
    if (options.frequencyPenalty !== undefined) params.frequencyPenalty = options.frequencyPenalty;
    if (options.stopSequences !== undefined && options.stopSequences.length > 0) params.stop = options.stopSequences;
    if (call.minP !== undefined) params.minP = call.minP;
    if (call.repeatPenalty !== undefined) params.repeatPenalty = call.repeatPenalty;
    if (call.penaltyLastN !== undefined) params.penaltyLastN = call.penaltyLastN;
    if (call.ignoreEog !== undefined) params.ignoreEog = call.ignoreEog;
    const reasoning = /<think>\s*$/.test(encoded.text);
    if (constraint) params.constraint = constraint;
    if (call.thinkingBudget !== undefined) params.thinkingBudget = call.thinkingBudget;
    if (constraint || call.thinkingBudget !== undefined) params.reasoning = reasoning;
    if ((engineOptionsOf(this.settings).prefixCacheSnapshots ?? 0) > 0 && Array.isArray(encoded.prompt)) {
      const head = systemPrefixLength(tokenizer, messages as ChatMessage[], chatOptions, encoded.prompt);
      if (head > 0) params.prefixCachePoints = [head];
    }
    return {
      engine,
      prompt: encoded.prompt,
      promptTokens: encoded.promptTokens,
      promptText: encoded.text,
      params,
      reasoning,
      parser: { reasoning, tools: useTools ? templateTools : false, format },
      functionTools,
      warnings,
    };
  }

  /** Starts the engine request; its bad parameters are the AI SDK's errors. */
  private start(prepared: PreparedCall, signal: AbortSignal | undefined, prompt: unknown) {
    try {
      return prepared.engine.generate(prepared.prompt, { ...prepared.params, ...(signal ? { signal } : {}) });
    } catch (error) {
      throw failure(error, prepared, prompt);
    }
  }

  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const prepared = await this.prepare(options);
    const timestamp = new Date();
    const generation = this.start(prepared, options.abortSignal, options.prompt);
    const parser = new OutputParser(prepared.parser);
    const counter = new ReasoningCounter(prepared.reasoning);
    const parts: ParsedOutput[] = [];
    let result: GenerationResult | undefined;
    try {
      for await (const event of generation) {
        if (event.type === "done") result = event.result;
        else {
          if (event.token >= 0) counter.push(event.text);
          parts.push(...parser.push(event.text));
        }
      }
    } catch (error) {
      throw failure(error, prepared, options.prompt);
    }
    result ??= await generation.result;
    if (result.stopReason === "abort") throw abortError(options.abortSignal);
    parts.push(...parser.flush());
    const content: LanguageModelV3Content[] = [];
    const warnings = [...prepared.warnings];
    for (const part of parts) {
      if (part.kind === "tool_call_start" || part.kind === "tool_call_arguments") continue;
      if (part.kind === "tool_call") {
        // a call the token limit cut off is never answered as a call (its arguments are not whole)
        if (part.cutOff) {
          warnings.push({ type: "other", message: `the output ended inside the call to ${part.name}: it is left out` });
          continue;
        }
        content.push({
          type: "tool-call",
          toolCallId: newId("call_"),
          toolName: part.name,
          input: part.arguments,
          ...warningsMetadata(part.warnings),
        });
        continue;
      }
      const type = part.kind === "reasoning" ? "reasoning" : "text";
      const last = content[content.length - 1];
      if (last && last.type === type) last.text += part.text;
      else content.push({ type, text: part.text });
    }
    return {
      content,
      finishReason: finishReasonOf(result.stopReason, parser.toolCallCount),
      usage: usageOf(result, counter.tokens),
      providerMetadata: metadataOf(result),
      request: { body: requestBody(prepared) },
      response: { id: newId("kq-"), timestamp, modelId: this.modelId },
      warnings,
    };
  }

  async doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    const prepared = await this.prepare(options);
    // the engine request ends when the caller aborts or when the reader cancels the stream
    const controller = new AbortController();
    const callerSignal = options.abortSignal;
    const onAbort = (): void => controller.abort(callerSignal?.reason);
    callerSignal?.addEventListener("abort", onAbort, { once: true });
    let generation: ReturnType<KeepquantLanguageModel["start"]>;
    try {
      generation = this.start(prepared, controller.signal, options.prompt);
    } catch (error) {
      callerSignal?.removeEventListener("abort", onAbort);
      throw error;
    }
    const events = generation[Symbol.asyncIterator]();
    const parser = new OutputParser(prepared.parser);
    const counter = new ReasoningCounter(prepared.reasoning);
    const responseId = newId("kq-");
    const cleanup = (): void => callerSignal?.removeEventListener("abort", onAbort);
    let writer: StreamPartWriter | undefined;

    const stream = new ReadableStream<LanguageModelV3StreamPart>({
      start: (out) => {
        writer = new StreamPartWriter((part) => out.enqueue(part));
        out.enqueue({ type: "stream-start", warnings: prepared.warnings });
        out.enqueue({ type: "response-metadata", id: responseId, timestamp: new Date(), modelId: this.modelId });
      },
      // a pull that enqueues nothing is not called again (the Streams spec): read engine events until a part is out
      pull: async (out) => {
        for (;;) {
          let next: IteratorResult<Awaited<ReturnType<typeof events.next>>["value"]>;
          try {
            next = await events.next();
          } catch (error) {
            cleanup();
            out.error(failure(error, prepared, options.prompt));
            return;
          }
          if (next.done) {
            cleanup();
            out.close();
            return;
          }
          const event = next.value;
          if (event.type === "token") {
            if (event.token >= 0) counter.push(event.text);
            if (writer!.write(parser.push(event.text)) > 0) return;
            continue;
          }
          cleanup();
          const result = event.result;
          if (result.stopReason === "abort") {
            out.error(abortError(callerSignal?.aborted ? callerSignal : controller.signal));
            return;
          }
          writer!.write(parser.flush());
          writer!.closeRun();
          out.enqueue({
            type: "finish",
            finishReason: finishReasonOf(result.stopReason, parser.toolCallCount),
            usage: usageOf(result, counter.tokens),
            providerMetadata: metadataOf(result),
          });
          out.close();
          return;
        }
      },
      cancel: (reason) => {
        cleanup();
        controller.abort(reason);
      },
    });
    return { stream, request: { body: requestBody(prepared) } };
  }
}
