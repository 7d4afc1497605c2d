import { encodeChat, Engine, fitConversation, type ChatMessage, type GenerateParams } from "@keepquant/engine";
import { defineCommand, write, type CommandIo } from "../command.js";
import { refuseUnlessFitsCpu } from "../residency-check.js";
import { chatInputIsTerminal, openChatInput } from "./chat-input.js";
import { MAX_EDIT_CHARACTERS } from "./chat-line-editor.js";
import { applyForcedThreads, chooseModel, resolveEngineOptions } from "./engine-options.js";
import { parseIntegerOption } from "./numeric-option.js";
import { GENERATION_OPTIONS, GENERATION_OPTIONS_HELP, parseSampling, parseThinkingBudget } from "./run.js";

/** Lines that end the session. */
const EXIT_COMMANDS = new Set(["/exit", "/quit"]);

export const command = defineCommand({
  name: "chat",
  summary: "chat with a qwen35 GGUF model through its chat template (default: the embedded default model)",
  usage:
    "chat [model.gguf] [--system TEXT] [--stats] [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ignore-eog] [--thinking-budget N] [--threads N] [--numerics llama|bf16] [--ctx N] [--kv-type f16|f32] [--flash-attn on|off] [--speculative mtp [--draft-tokens K] [--draft-vocab N]] [--force]",
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
    const model = await chooseModel(positionals, io);
    const modelPath = model.file;
    if (model.notice) write(io.stderr, model.notice);
    await applyForcedThreads(engineOptions);
    await refuseUnlessFitsCpu(modelPath, engineOptions.options, { force: values.force === true, io });
    const engine = await Engine.load(modelPath, engineOptions.options);
    const tokenizer = engine.tokenizer;
    if (!tokenizer) {
      engine.dispose();
      throw Object.assign(new Error(`${modelPath} has no usable tokenizer: chat needs one`), { code: "ENGINE_NO_TOKENIZER" });
    }
    let messages: ChatMessage[] = values.system === undefined ? [] : [{ role: "system", content: values.system }];
    // only the template makes special tokens: "<|im_start|>" typed by the user stays text
    const encodeConversation = (conversation: readonly ChatMessage[]): number[] => encodeChat(tokenizer, [...conversation]).ids;
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
        messages.push({ role: "user", content: text });
        // the whole conversation, or its most recent turns: first leaving room for an answer, then any room at all
        const window = fitConversation(messages, encodeConversation, budget) ?? fitConversation(messages, encodeConversation, context - 1);
        if (!window) {
          messages.pop();
          const length = encodeConversation([...messages.filter((m) => m.role === "system"), { role: "user", content: text }]).length;
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
        messages = window.messages;
        const ids = window.ids;
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
        for await (const event of engine.generate(ids, params)) {
          // (raw mode keeps the terminal's output processing: "\n" still starts a new line)
          if (event.type === "token") io.stdout.write(event.text);
          else {
            answer = event.result.text;
            answerTokens = event.result.tokens.length;
          }
        }
        const aborted = current.signal.aborted;
        current = undefined;
        io.stdout.write("\n");
        if (values.stats === true) {
          write(
            io.stderr,
            `stats: message ${Array.from(text).length} characters, ${text.split("\n").length} lines; prompt ${ids.length} tokens; answer ${answerTokens} tokens${aborted ? " (stopped)" : ""}`,
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
