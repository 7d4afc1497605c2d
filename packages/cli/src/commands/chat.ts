import {
  type ChatImagePart,
  type ChatMessage,
  type EncodedImage,
  Engine,
  EngineError,
  fitConversation,
  type GenerateParams,
  type MultimodalChatMessage,
} from "@keepquant/engine";
import { CliUsageError, defineCommand, write, type CommandIo } from "../command.js";
import { describeError } from "../errors.js";
import { refuseUnlessFitsCpu } from "../residency-check.js";
import { chatInputIsTerminal, openChatInput } from "./chat-input.js";
import { MAX_EDIT_CHARACTERS } from "./chat-line-editor.js";
import { applyForcedThreads, chooseModel, resolveEngineOptions } from "./engine-options.js";
import { parseIntegerOption } from "./numeric-option.js";
import { GENERATION_OPTIONS, GENERATION_OPTIONS_HELP, parseSampling, parseThinkingBudget } from "./run.js";
import { encodeImageFile, imageChatPrompt, localProjectorFile, noProjectorError, parseProvider, readImageFile } from "./vision.js";

/** Lines that end the session. */
const EXIT_COMMANDS = new Set(["/exit", "/quit"]);

/** `/image FILE`: attaches an image to the next user message. */
const IMAGE_COMMAND = /^\/image(?:\s+(.*))?$/s;

export const command = defineCommand({
  name: "chat",
  summary: "chat with a qwen35 GGUF model through its chat template (default: the embedded default model)",
  usage:
    "chat [model.gguf] [--system TEXT] [--stats] [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ignore-eog] [--thinking-budget N] [--threads N] [--numerics llama|bf16] [--ctx N] [--kv-type f16|f32] [--flash-attn on|off] [--speculative mtp [--draft-tokens K] [--draft-vocab N]] [--mmproj FILE] [--provider auto|ts] [--force]",
  help: [
    "--system TEXT         system message of the conversation",
    "--max-tokens N        tokens per answer (default 256)",
    ...GENERATION_OPTIONS_HELP,
    "--stats               after each answer, one line on stderr: the message's characters and lines, the prompt's and the answer's tokens",
    "stdin a terminal: a line editor (arrows, Home/End, Ctrl-A/E/K/U/W, history with up/down); a paste is one message, newlines",
    "included (Alt-Enter adds one by hand); keys typed during an answer wait for the next prompt; Ctrl-C stops an answer,",
    "clears the line, or exits (130) on an empty line; Ctrl-D on an empty line exits; with stdout not a terminal",
    "(`keepquant chat > answers.txt`) the editor draws on stderr, else on the controlling terminal",
    "from a pipe: one user message per line; /exit or end of input stops; Ctrl-C stops an answer (exits 130 when idle)",
    "a conversation longer than the context drops its oldest turns (the system message stays)",
    "/image FILE attaches an image (PNG, JPEG, WebP, GIF) to the next message, before its text (needs --mmproj); /exit or /quit ends",
  ],
  options: {
    system: { type: "string" },
    stats: { type: "boolean" },
    ...GENERATION_OPTIONS,
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    const maxTokens = parseIntegerOption("max-tokens", values["max-tokens"], { min: 1 }) ?? 256;
    const sampling = parseSampling(values);
    const thinkingBudget = parseThinkingBudget(values["thinking-budget"]);
    const engineOptions = await resolveEngineOptions(values, io.env);
    const provider = parseProvider(values.provider);
    const model = await chooseModel(positionals, io);
    const modelPath = model.file;
    if (model.notice) write(io.stderr, model.notice);
    const projector = values.mmproj === undefined ? undefined : await localProjectorFile(values.mmproj, io);
    const options = {
      ...engineOptions.options,
      ...(provider === undefined ? {} : { provider }),
      ...(projector === undefined ? {} : { projector }),
    };
    await applyForcedThreads(engineOptions);
    await refuseUnlessFitsCpu(modelPath, options, { force: values.force === true, io });
    const engine = await Engine.load(modelPath, options);
    const tokenizer = engine.tokenizer;
    if (!tokenizer) {
      engine.dispose();
      throw Object.assign(new Error(`${modelPath} has no usable tokenizer: chat needs one`), { code: "ENGINE_NO_TOKENIZER" });
    }
    let messages: MultimodalChatMessage[] = values.system === undefined ? [] : [{ role: "system", content: values.system }];
    // each attached image, encoded once (its tokens count in the window), by the identity of its bytes
    const encodedImages = new Map<Uint8Array, EncodedImage>();
    let attached: ChatImagePart[] = [];
    // only the template makes special tokens: "<|im_start|>" typed by the user stays text. An image counts its
    // tokens (negative placeholders: only the length of these ids is read before the window is encoded again)
    const encodeConversation = (conversation: readonly MultimodalChatMessage[]): number[] => {
      const chat = imageChatPrompt(tokenizer, conversation, encodedImages);
      return chat.prompt.pieces.flatMap((piece) =>
        Array.isArray(piece) ? [...piece] : Array<number>((piece as EncodedImage).tokens).fill(-1),
      );
    };
    // fitConversation reads roles only; the messages keep their image parts
    const fit = (budgetTokens: number) =>
      fitConversation(
        messages as ChatMessage[],
        (conversation) => encodeConversation(conversation as MultimodalChatMessage[]),
        budgetTokens,
      );
    /** An error line of the session (it goes on): `error: CODE: message`, as the process's error lines. */
    const sayError = (error: unknown, suffix = ""): void => {
      const described = describeError(error);
      write(io.stderr, `error: ${described.code}: ${described.message.replace(/\s*\n\s*/g, " ")}${suffix}`);
    };
    const attach = async (file: string): Promise<void> => {
      if (file === "") throw new CliUsageError("/image needs a file: /image FILE");
      if (!engine.projector) throw noProjectorError("/image");
      const image = await readImageFile(file);
      const encoded = await encodeImageFile(engine, file, image);
      encodedImages.set(image, encoded);
      attached.push({ type: "image", image });
      write(
        io.stderr,
        `attached ${file} (${encoded.tokens} image tokens, a ${encoded.gridWidth} x ${encoded.gridHeight} grid): ${attached.length} image(s) go with your next message`,
      );
    };
    // Leave room for an answer: maxTokens, but at most half the context.
    const context = engine.contextLength;
    const budget = Math.max(1, context - Math.min(maxTokens, Math.floor(context / 2)));
    let toldDropping = false;
    let current: AbortController | undefined;
    const input = openChatInput(process.stdin, io);
    const terminal = chatInputIsTerminal(process.stdin);
    input.onInterrupt = () => current?.abort();
    input.onTooLong = (characters) =>
      write(
        io.stderr,
        `error: CHAT_MESSAGE_TOO_LONG: this message has ${characters} characters, more than the line editor holds (${MAX_EDIT_CHARACTERS}): not inserted`,
      );
    // piped input on a terminal's output keeps the plain prompt; on a terminal's input the line editor draws its own
    const prompt = (): void => {
      if (io.interactive && !terminal) io.stdout.write("> ");
    };
    try {
      for (;;) {
        prompt();
        const next = await input.read();
        if (next.kind === "interrupt") return 130;
        if (next.kind === "eof") break;
        const text = next.text.trim();
        if (EXIT_COMMANDS.has(text)) break;
        if (text === "") continue;
        const imageCommand = IMAGE_COMMAND.exec(text);
        if (imageCommand) {
          try {
            await attach((imageCommand[1] ?? "").trim());
          } catch (error) {
            sayError(error);
          }
          continue;
        }
        const user: MultimodalChatMessage =
          attached.length === 0 ? { role: "user", content: text } : { role: "user", content: [...attached, { type: "text", text }] };
        messages.push(user);
        // the whole conversation, or its most recent turns: first leaving room for an answer, then any room at all
        const window = fit(budget) ?? fit(context - 1);
        if (!window) {
          messages.pop();
          const length = encodeConversation([...messages.filter((m) => m.role === "system"), user]).length;
          write(
            io.stderr,
            `error: CHAT_MESSAGE_TOO_LONG: this message makes a prompt of ${length} tokens, longer than the context (${context} tokens): not sent`,
          );
          continue;
        }
        if (window.dropped > 0 && !toldDropping) {
          write(
            io.stderr,
            `note: the conversation is longer than the context (${context} tokens): dropping the oldest turns (the system message stays)`,
          );
          toldDropping = true;
        }
        attached = [];
        messages = window.messages as MultimodalChatMessage[];
        const chat = imageChatPrompt(tokenizer, messages, encodedImages);
        const ids = chat.textIds;
        current = new AbortController();
        // the template opened a reasoning block: the budget closes it
        const thinking = thinkingBudget !== undefined && /<think>\s*$/.test(tokenizer.decode(ids.slice(-4), { special: true }));
        const params: GenerateParams = {
          maxTokens,
          ...sampling,
          signal: current.signal,
          ...(thinking ? { reasoning: true, thinkingBudget } : {}),
        };
        let answer = "";
        let answerTokens = 0;
        try {
          for await (const event of engine.generate(chat.images === 0 ? ids : chat.prompt, params)) {
            // (raw mode keeps the terminal's output processing: "\n" still starts a new line)
            if (event.type === "token") io.stdout.write(event.text);
            else {
              answer = event.result.text;
              answerTokens = event.result.tokens.length;
            }
          }
        } catch (error) {
          // a message with images the engine refuses (e.g. the native step before it takes image rows): said, not sent
          if (chat.images === 0 || !EngineError.isInstance(error)) throw error;
          current = undefined;
          messages.pop();
          sayError(error, " (the message with its images was not sent)");
          continue;
        }
        const aborted = current.signal.aborted;
        current = undefined;
        io.stdout.write("\n");
        if (values.stats === true) {
          write(
            io.stderr,
            `stats: message ${Array.from(text).length} characters, ${text.split("\n").length} lines; prompt ${chat.tokens} tokens; answer ${answerTokens} tokens${aborted ? " (stopped)" : ""}`,
          );
        }
        messages.push({ role: "assistant", content: answer });
      }
      return 0;
    } finally {
      input.close();
      engine.dispose();
    }
  },
});
