import fs from "node:fs";
import readline from "node:readline";
import { encodeChat, Engine, type ChatMessage, type EngineOptions, type GenerateParams } from "@keepquant/engine";
import { CliUsageError, defineCommand, write, type CommandIo } from "../command.js";
import { refuseUnlessFitsCpu } from "../residency-check.js";
import { DEFAULT_MODEL_FIXTURE, ensureDefaultModel, GENERATION_OPTIONS, parseNumber } from "./run.js";

/** Lines that end the session. */
const EXIT_COMMANDS = new Set(["/exit", "/quit"]);

export const command = defineCommand({
  name: "chat",
  summary: "chat with a qwen35 GGUF model through its chat template (default: the embedded synthetic model)",
  usage: "chat [model.gguf] [--system TEXT] [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N] [--numerics llama|bf16] [--force]",
  help: [
    "--system TEXT       system message of the conversation",
    "--max-tokens N      tokens per answer (default 256)",
    "--temperature T     0 = greedy (default 0)",
    "--top-k K, --top-p P, --seed S, --threads N, --numerics llama|bf16, --force   as for `keepquant run`",
    "reads one user message per line from stdin; /exit or end of input stops; Ctrl-C stops an answer",
  ],
  options: {
    system: { type: "string" },
    ...GENERATION_OPTIONS,
    force: { type: "boolean" },
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    if (positionals.length > 1) throw new CliUsageError(`expected at most one model file, got ${positionals.length}`);
    const numerics = values.numerics ?? "llama";
    if (numerics !== "llama" && numerics !== "bf16") throw new CliUsageError(`--numerics ${JSON.stringify(numerics)}: expected llama or bf16`);
    const maxTokens = parseNumber("max-tokens", values["max-tokens"], (n) => Number.isInteger(n) && n >= 1, "an integer >= 1") ?? 256;
    const temperature = parseNumber("temperature", values.temperature, (n) => n >= 0, "a number >= 0") ?? 0;
    const topK = parseNumber("top-k", values["top-k"], (n) => Number.isInteger(n) && n >= 0, "an integer >= 0");
    const topP = parseNumber("top-p", values["top-p"], (n) => n > 0 && n <= 1, "a number in (0, 1]");
    const seed = parseNumber("seed", values.seed, (n) => Number.isInteger(n) && n >= 0, "an integer >= 0") ?? 0;
    const threads = parseNumber("threads", values.threads, (n) => Number.isInteger(n) && n >= 1, "an integer >= 1");

    let modelPath: string;
    if (positionals.length === 0) {
      write(io.stderr, `keepquant: no model given, using the embedded SYNTHETIC qwen35 model (${DEFAULT_MODEL_FIXTURE}: random weights, gibberish answers)`);
      modelPath = await ensureDefaultModel(io.env);
    } else {
      modelPath = positionals[0]!;
      if (!fs.existsSync(modelPath)) throw Object.assign(new Error(`model file not found: ${modelPath}`), { code: "MODEL_NOT_FOUND" });
    }
    const engineOptions: EngineOptions = { numerics, ...(threads === undefined ? {} : { threads }) };
    await refuseUnlessFitsCpu(modelPath, engineOptions, { force: values.force === true, io });
    const engine = await Engine.load(modelPath, engineOptions);
    const tokenizer = engine.tokenizer;
    if (!tokenizer) {
      engine.dispose();
      throw Object.assign(new Error(`${modelPath} has no usable tokenizer: chat needs one`), { code: "ENGINE_NO_TOKENIZER" });
    }
    const messages: ChatMessage[] = values.system === undefined ? [] : [{ role: "system", content: values.system }];
    let current: AbortController | undefined;
    const onSigint = (): void => {
      if (current) current.abort();
      else process.exit(130);
    };
    process.on("SIGINT", onSigint);
    const lines = readline.createInterface({ input: process.stdin, terminal: false });
    const prompt = (): void => {
      if (io.interactive) io.stdout.write("> ");
    };
    try {
      prompt();
      for await (const line of lines) {
        const text = line.trim();
        if (EXIT_COMMANDS.has(text)) break;
        if (text === "") {
          prompt();
          continue;
        }
        messages.push({ role: "user", content: text });
        // only the template makes special tokens: "<|im_start|>" typed by the user stays text
        const { ids } = encodeChat(tokenizer, messages);
        current = new AbortController();
        const params: GenerateParams = {
          maxTokens,
          temperature,
          seed,
          signal: current.signal,
          ...(topK === undefined ? {} : { topK }),
          ...(topP === undefined ? {} : { topP }),
        };
        let answer = "";
        for await (const event of engine.generate(ids, params)) {
          if (event.type === "token") io.stdout.write(event.text);
          else answer = event.result.text;
        }
        current = undefined;
        io.stdout.write("\n");
        messages.push({ role: "assistant", content: answer });
        prompt();
      }
      return 0;
    } finally {
      process.removeListener("SIGINT", onSigint);
      lines.close();
      engine.dispose();
    }
  },
});
