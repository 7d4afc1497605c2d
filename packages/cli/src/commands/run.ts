import fs from "node:fs";
import path from "node:path";
import {
  checkJsonSchema,
  ConstraintError,
  type EncodedImage,
  Engine,
  type GenerateParams,
  type GenerationResult,
  type MultimodalPrompt,
} from "@keepquant/engine";
import { defaultModelInfo } from "@keepquant/default-model";
import { CliUsageError, defineCommand, toJson, write, type CommandIo } from "../command.js";
import { refuseUnlessFitsCpu } from "../residency-check.js";
import { applyForcedThreads, chooseModel, ENGINE_OPTIONS, ENGINE_OPTIONS_HELP, resolveEngineOptions } from "./engine-options.js";
import { decimalInteger, parseIntegerOption, parseNumberOption } from "./numeric-option.js";
import {
  encodeImageFile,
  imageChatPrompt,
  localProjectorFile,
  noProjectorError,
  parseProvider,
  readImageFile,
  VISION_OPTIONS,
  VISION_OPTIONS_HELP,
} from "./vision.js";

/** Exit code after Ctrl-C (the shell convention: 128 + SIGINT). */
export const EXIT_INTERRUPTED = 130;

export function parsePromptIds(text: string): number[] {
  const ids = text.split(",").map(decimalInteger);
  if (ids.some((id) => !(id >= 0))) {
    throw new CliUsageError(`--prompt-ids ${JSON.stringify(text)}: expected comma-separated token ids in decimal digits, e.g. 1,2,3`);
  }
  return ids;
}

/** A load progress reporter: a redrawn bar on a terminal, nothing per step otherwise. */
function progressReporter(io: CommandIo, label: string): { onProgress: (done: number, total: number) => void; finish: () => void } {
  let lastPercent = -1;
  return {
    onProgress(done, total) {
      if (!io.interactive || total <= 0) return;
      const percent = Math.floor((100 * done) / total);
      if (percent === lastPercent) return;
      lastPercent = percent;
      const width = 30;
      const filled = Math.round((width * percent) / 100);
      io.stderr.write(`\rloading ${label} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${percent}%`);
    },
    finish() {
      if (io.interactive && lastPercent >= 0) io.stderr.write("\r\x1b[K");
    },
  };
}

/** Generation options shared by `run` and `chat` (parsed by the same code in both). */
export const GENERATION_OPTIONS = {
  "max-tokens": { type: "string" },
  temperature: { type: "string" },
  "top-k": { type: "string" },
  "top-p": { type: "string" },
  seed: { type: "string" },
  "ignore-eog": { type: "boolean" },
  "thinking-budget": { type: "string" },
  ...ENGINE_OPTIONS,
  ...VISION_OPTIONS,
} as const;

/** Help lines of GENERATION_OPTIONS shared by run and chat (after each command's own lines). */
export const GENERATION_OPTIONS_HELP: readonly string[] = [
  "--temperature T       0 = greedy (default 0)",
  "--top-k K             keep the K most likely tokens (default: off)",
  "--top-p P             nucleus sampling threshold in (0, 1] (default: off)",
  "--seed S              sampling seed (default 0)",
  "--ignore-eog          keep generating after an end-of-generation token",
  "--thinking-budget N   most reasoning tokens before </think> is written (the prompt ends inside <think>)",
  ...ENGINE_OPTIONS_HELP,
  ...VISION_OPTIONS_HELP,
];

/** Parses the sampling part of GENERATION_OPTIONS (the engine part goes through resolveEngineOptions). */
export function parseSampling(values: {
  temperature?: string | undefined;
  "top-k"?: string | undefined;
  "top-p"?: string | undefined;
  seed?: string | undefined;
  "ignore-eog"?: boolean | undefined;
}): Pick<GenerateParams, "temperature" | "topK" | "topP" | "seed" | "ignoreEog"> {
  const temperature = parseNumberOption("temperature", values.temperature, { min: 0 }) ?? 0;
  const topK = parseIntegerOption("top-k", values["top-k"], { min: 0 });
  const topP = parseNumberOption("top-p", values["top-p"], { min: 0, minExclusive: true, max: 1 });
  const seed = parseIntegerOption("seed", values.seed, { min: 0 }) ?? 0;
  return {
    temperature,
    seed,
    ...(topK === undefined ? {} : { topK }),
    ...(topP === undefined ? {} : { topP }),
    ...(values["ignore-eog"] ? { ignoreEog: true } : {}),
  };
}

/** `--thinking-budget N` (an integer >= 0), or undefined. */
export function parseThinkingBudget(text: string | undefined): number | undefined {
  return parseIntegerOption("thinking-budget", text, { min: 0 });
}

/** Longest --json-schema file read (bytes). */
export const MAX_JSON_SCHEMA_FILE_BYTES = 1 << 20;

/** Reads and checks a --json-schema file: a usage error naming the file for anything that is not an enforceable JSON Schema. */
export function readJsonSchemaFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    const size = fs.statSync(file).size;
    if (size > MAX_JSON_SCHEMA_FILE_BYTES) {
      throw new CliUsageError(`--json-schema ${file}: ${size} bytes, larger than ${MAX_JSON_SCHEMA_FILE_BYTES}`);
    }
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    if (error instanceof CliUsageError) throw error;
    throw new CliUsageError(`--json-schema ${file}: cannot read the file (${(error as Error).message})`);
  }
  let schema: unknown;
  try {
    schema = JSON.parse(text);
  } catch (error) {
    throw new CliUsageError(`--json-schema ${file}: not JSON (${(error as Error).message})`);
  }
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    throw new CliUsageError(`--json-schema ${file}: a JSON Schema is a JSON object`);
  }
  try {
    checkJsonSchema(schema, file);
  } catch (error) {
    if (ConstraintError.isInstance(error)) throw new CliUsageError(`--json-schema ${error.message}`);
    throw error;
  }
  return schema as Record<string, unknown>;
}

export const command = defineCommand({
  name: "run",
  summary: "generate text with a qwen35 GGUF model (default: the embedded default model)",
  usage:
    "run [model.gguf] (--prompt TEXT [--parse-special] | --prompt-ids 1,2,3) [--json-schema FILE] [--thinking-budget N] [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ignore-eog] [--threads N] [--numerics llama|bf16] [--ctx N] [--kv-type f16|f32] [--flash-attn on|off] [--speculative mtp [--draft-tokens K] [--draft-vocab N]] [--mmproj FILE [--image FILE]...] [--provider auto|ts] [--force] [--json]",
  help: [
    '--prompt TEXT         prompt text, tokenized as plain text ("<|im_start|>" stays text)',
    "--parse-special       turn special-token texts in --prompt into their tokens (trusted prompts)",
    "--prompt-ids IDS      prompt as comma-separated token ids",
    "--json-schema FILE    constrain the output to one JSON document valid for the JSON Schema in FILE",
    "--max-tokens N        tokens to generate (default 64; 1024 with --json-schema)",
    "--image FILE          an image (PNG, JPEG, WebP, GIF) before the prompt in one user message, through the chat template",
    "                      (repeatable, in order; needs --mmproj, as llama.cpp's mtmd-cli)",
    ...GENERATION_OPTIONS_HELP,
    "--json                print one JSON document instead of streaming text",
    "without model.gguf: the embedded default model (@keepquant/default-model: a small qwen35 trained on English fortunes)",
    "Ctrl-C stops the generation and exits 130",
  ],
  options: {
    prompt: { type: "string" },
    "prompt-ids": { type: "string" },
    "parse-special": { type: "boolean" },
    "json-schema": { type: "string" },
    image: { type: "string", multiple: true },
    ...GENERATION_OPTIONS,
    json: { type: "boolean" },
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    const hasText = values.prompt !== undefined;
    const hasIds = values["prompt-ids"] !== undefined;
    if (hasText === hasIds) throw new CliUsageError("give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
    const schema = values["json-schema"] === undefined ? undefined : readJsonSchemaFile(values["json-schema"]);
    const maxTokens = parseIntegerOption("max-tokens", values["max-tokens"], { min: 1 }) ?? (schema ? 1024 : 64);
    const sampling = parseSampling(values);
    const thinkingBudget = parseThinkingBudget(values["thinking-budget"]);
    const engineOptions = await resolveEngineOptions(values, io.env);
    const numerics = engineOptions.options.numerics;
    const promptIds = hasIds ? parsePromptIds(values["prompt-ids"]!) : undefined;
    const json = values.json === true;
    const provider = parseProvider(values.provider);
    const imageFiles = values.image ?? [];
    if (imageFiles.length > 0) {
      if (values.mmproj === undefined) throw noProjectorError("--image");
      if (hasIds) throw new CliUsageError("--image goes into a chat message with --prompt TEXT, not --prompt-ids");
      if (values["parse-special"])
        throw new CliUsageError("--image renders the prompt through the chat template: --parse-special does not apply");
    }
    // read before anything loads: a missing file is said at once
    const imageBytes = await Promise.all(imageFiles.map(readImageFile));

    const model = await chooseModel(positionals, io);
    const synthetic = model.isDefault && defaultModelInfo().synthetic;
    const modelPath = model.file;
    if (model.notice && !json) write(io.stderr, model.notice);

    await applyForcedThreads(engineOptions);
    const progress = progressReporter(io, path.basename(modelPath));
    const loadStarted = performance.now();
    const projector = values.mmproj === undefined ? undefined : await localProjectorFile(values.mmproj, io);
    const options = {
      ...engineOptions.options,
      ...(provider === undefined ? {} : { provider }),
      ...(projector === undefined ? {} : { projector }),
      onProgress: progress.onProgress,
    };
    await refuseUnlessFitsCpu(modelPath, options, { force: values.force === true, io });
    const engine = await Engine.load(modelPath, options);
    progress.finish();
    const loadMs = performance.now() - loadStarted;
    try {
      const loadStats = engine.stats();
      if (!json) {
        write(
          io.stderr,
          `loaded ${modelPath}${projector === undefined ? "" : ` and the projector ${projector}`} in ${Math.round(loadMs)} ms (${numerics} numerics)`,
        );
        for (const line of loadStats.diagnostics) write(io.stderr, `note: ${line}`);
      }
      let prompt: number[] | MultimodalPrompt;
      let promptTokens: number[];
      let images: { file: string; tokens: number; gridWidth: number; gridHeight: number }[] | undefined;
      if (imageFiles.length > 0) {
        const tokenizer = engine.tokenizer;
        if (!tokenizer) throw new CliUsageError(`${modelPath} has no usable tokenizer: --image needs its chat template`);
        const encoded = new Map<Uint8Array, EncodedImage>();
        for (const [i, bytes] of imageBytes.entries()) encoded.set(bytes, await encodeImageFile(engine, imageFiles[i]!, bytes));
        // the images first, then the text, in one user message (mtmd-cli's --image)
        const content = [
          ...imageBytes.map((image) => ({ type: "image" as const, image })),
          { type: "text" as const, text: values.prompt! },
        ];
        const chat = imageChatPrompt(tokenizer, [{ role: "user", content }], encoded);
        prompt = chat.prompt;
        promptTokens = chat.textIds;
        images = imageFiles.map((file, i) => {
          const image = encoded.get(imageBytes[i]!)!;
          return { file, tokens: image.tokens, gridWidth: image.gridWidth, gridHeight: image.gridHeight };
        });
        if (!json) write(io.stderr, `images: ${images.map((image) => `${image.file} (${image.tokens} tokens)`).join(", ")}`);
      } else {
        prompt = promptIds ?? engine.tokenize(values.prompt!, values["parse-special"] === true);
        promptTokens = prompt;
      }
      const controller = new AbortController();
      let interrupted = false;
      const onSigint = (): void => {
        interrupted = true;
        controller.abort();
      };
      process.once("SIGINT", onSigint);
      const params: GenerateParams = {
        maxTokens,
        ...sampling,
        signal: controller.signal,
        ...(schema ? { constraint: { type: "json_schema", schema } } : {}),
        // a thinking budget means the prompt ends inside <think>: the constraint starts after </think>
        ...(thinkingBudget === undefined ? {} : { reasoning: true, thinkingBudget }),
      };
      let result: GenerationResult | undefined;
      try {
        for await (const event of engine.generate(prompt, params)) {
          if (event.type === "token") {
            if (!json && event.text) io.stdout.write(event.text);
          } else {
            result = event.result;
          }
        }
      } finally {
        process.removeListener("SIGINT", onSigint);
      }
      if (!result) throw new Error("generation ended without a result");
      const stats = engine.stats();
      if (json) {
        write(
          io.stdout,
          toJson({
            model: modelPath,
            synthetic,
            numerics,
            contextLength: engine.contextLength,
            promptTokens,
            ...(images ? { images } : {}),
            tokens: result.tokens,
            text: result.text,
            stopReason: result.stopReason,
            stats: {
              loadMs,
              ...result.stats,
              residentBytes: stats.residentBytes,
              ...(stats.speculative ? { speculative: stats.speculative } : {}),
            },
            providers: stats.providers,
            diagnostics: stats.diagnostics,
          }),
        );
      } else {
        io.stdout.write("\n");
        const s = result.stats;
        write(
          io.stderr,
          `[${s.promptTokens} prompt tokens, ${s.generatedTokens} generated, stop: ${result.stopReason}; ` +
            `prefill ${s.prefillTokensPerSecond.toFixed(1)} tok/s, decode ${s.decodeTokensPerSecond.toFixed(1)} tok/s` +
            (stats.speculative
              ? `; speculative mtp k=${stats.speculative.draftTokens}: ${stats.speculative.accepted}/${stats.speculative.drafted} drafts accepted, ` +
                `${stats.speculative.tokensPerTargetStep.toFixed(2)} tokens per target step`
              : "") +
            "]",
        );
      }
      if (interrupted) return EXIT_INTERRUPTED;
      if (schema && result.stopReason !== "eog") {
        // never an unfinished document presented as valid
        write(
          io.stderr,
          `error: JSON_SCHEMA_INCOMPLETE: the JSON document did not finish within --max-tokens ${maxTokens} (stop: ${result.stopReason})`,
        );
        return 1;
      }
      return 0;
    } finally {
      engine.dispose();
    }
  },
});
