import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  Engine,
  ensureFixture,
  fixtureTokenizerFromJson,
  parityFixture,
  type EngineOptions,
  type GenerateParams,
  type GenerationResult,
} from "@keepquant/engine";
import manifest from "../../../../goldens/parity/manifest.json" with { type: "json" };
import fixtureVocabulary from "../../../../goldens/tokenizer/vocab.json" with { type: "json" };
import { CliUsageError, defineCommand, toJson, write, type CommandIo } from "../command.js";
import { refuseUnlessFitsCpu } from "../residency-check.js";

/**
 * The embedded default model: the parity fixture `tied-4l-f32`, a SYNTHETIC qwen35 (hidden 256,
 * 4 layers, random calm weights, the fixture BPE vocabulary). It shows the pipeline works; its
 * text is gibberish. Generated deterministically on first use into the cache folder and checked
 * against the sha256 the parity manifest pins.
 */
export const DEFAULT_MODEL_FIXTURE = "tied-4l-f32";

/** KEEPQUANT_CACHE_DIR, else $XDG_CACHE_HOME/keepquant, else ~/.cache/keepquant. */
export function cacheDir(env: NodeJS.ProcessEnv): string {
  if (env.KEEPQUANT_CACHE_DIR) return env.KEEPQUANT_CACHE_DIR;
  const base = env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache");
  return path.join(base, "keepquant");
}

export async function ensureDefaultModel(env: NodeJS.ProcessEnv): Promise<string> {
  const pinned = manifest.fixtures.find((f) => f.name === DEFAULT_MODEL_FIXTURE)?.sha256;
  return ensureFixture(parityFixture(DEFAULT_MODEL_FIXTURE), {
    cacheDir: cacheDir(env),
    tokenizer: fixtureTokenizerFromJson(fixtureVocabulary),
    ...(pinned ? { expectedSha256: { [DEFAULT_MODEL_FIXTURE]: pinned } } : {}),
  });
}

export function parseNumber(name: string, text: string | undefined, check: (n: number) => boolean, rule: string): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || !check(value)) throw new CliUsageError(`--${name} ${JSON.stringify(text)}: expected ${rule}`);
  return value;
}

export function parsePromptIds(text: string): number[] {
  const parts = text.split(",").map((p) => p.trim());
  if (parts.length === 0 || parts.some((p) => !/^\d+$/.test(p))) {
    throw new CliUsageError(`--prompt-ids ${JSON.stringify(text)}: expected comma-separated token ids, e.g. 1,2,3`);
  }
  return parts.map(Number);
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
  threads: { type: "string" },
  numerics: { type: "string" },
} as const;

export const command = defineCommand({
  name: "run",
  summary: "generate text with a qwen35 GGUF model (default: the embedded synthetic model)",
  usage:
    "run [model.gguf] (--prompt TEXT [--parse-special] | --prompt-ids 1,2,3) [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N] [--numerics llama|bf16] [--json] [--force]",
  help: [
    "--prompt TEXT         prompt text, tokenized as plain text (\"<|im_start|>\" stays text)",
    "--parse-special       turn special-token texts in --prompt into their tokens (trusted prompts)",
    "--prompt-ids IDS      prompt as comma-separated token ids",
    "--max-tokens N        tokens to generate (default 64)",
    "--temperature T       0 = greedy (default 0)",
    "--top-k K             keep the K most likely tokens (default: off)",
    "--top-p P             nucleus sampling threshold in (0, 1] (default: off)",
    "--seed S              sampling seed (default 0)",
    "--threads N           threads for the native provider",
    "--numerics MODE       llama (default: llama.cpp's CPU numerics) or bf16 (the keep-quant contract)",
    "--json                print one JSON document instead of streaming text",
    "--force               load even when the planner says the model does not fit in available memory",
    "without model.gguf: the embedded default, a small SYNTHETIC qwen35 (random weights, gibberish output)",
  ],
  options: {
    prompt: { type: "string" },
    "prompt-ids": { type: "string" },
    "parse-special": { type: "boolean" },
    ...GENERATION_OPTIONS,
    json: { type: "boolean" },
    force: { type: "boolean" },
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    if (positionals.length > 1) throw new CliUsageError(`expected at most one model file, got ${positionals.length}`);
    const hasText = values.prompt !== undefined;
    const hasIds = values["prompt-ids"] !== undefined;
    if (hasText === hasIds) throw new CliUsageError("give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
    const numerics = values.numerics ?? "llama";
    if (numerics !== "llama" && numerics !== "bf16") throw new CliUsageError(`--numerics ${JSON.stringify(numerics)}: expected llama or bf16`);
    const maxTokens = parseNumber("max-tokens", values["max-tokens"], (n) => Number.isInteger(n) && n >= 1, "an integer >= 1") ?? 64;
    const temperature = parseNumber("temperature", values.temperature, (n) => n >= 0, "a number >= 0") ?? 0;
    const topK = parseNumber("top-k", values["top-k"], (n) => Number.isInteger(n) && n >= 0, "an integer >= 0");
    const topP = parseNumber("top-p", values["top-p"], (n) => n > 0 && n <= 1, "a number in (0, 1]");
    const seed = parseNumber("seed", values.seed, (n) => Number.isInteger(n) && n >= 0, "an integer >= 0") ?? 0;
    const threads = parseNumber("threads", values.threads, (n) => Number.isInteger(n) && n >= 1, "an integer >= 1");
    const promptIds = hasIds ? parsePromptIds(values["prompt-ids"]!) : undefined;
    const json = values.json === true;

    const synthetic = positionals.length === 0;
    let modelPath: string;
    if (synthetic) {
      if (!json) write(io.stderr, `keepquant: no model given, using the embedded SYNTHETIC qwen35 model (${DEFAULT_MODEL_FIXTURE}: random weights, gibberish text)`);
      modelPath = await ensureDefaultModel(io.env);
    } else {
      modelPath = positionals[0]!;
      if (!fs.existsSync(modelPath)) throw Object.assign(new Error(`model file not found: ${modelPath}`), { code: "MODEL_NOT_FOUND" });
    }

    const progress = progressReporter(io, path.basename(modelPath));
    const loadStarted = performance.now();
    const options: EngineOptions = { numerics, onProgress: progress.onProgress, ...(threads === undefined ? {} : { threads }) };
    await refuseUnlessFitsCpu(modelPath, options, { force: values.force === true, io });
    const engine = await Engine.load(modelPath, options);
    progress.finish();
    const loadMs = performance.now() - loadStarted;
    try {
      const loadStats = engine.stats();
      if (!json) {
        write(io.stderr, `loaded ${modelPath} in ${Math.round(loadMs)} ms (${numerics} numerics)`);
        for (const line of loadStats.diagnostics) write(io.stderr, `note: ${line}`);
      }
      const prompt = promptIds ?? engine.tokenize(values.prompt!, values["parse-special"] === true);
      const controller = new AbortController();
      const onSigint = (): void => controller.abort();
      process.once("SIGINT", onSigint);
      const params: GenerateParams = {
        maxTokens,
        temperature,
        seed,
        signal: controller.signal,
        ...(topK === undefined ? {} : { topK }),
        ...(topP === undefined ? {} : { topP }),
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
            promptTokens: prompt,
            tokens: result.tokens,
            text: result.text,
            stopReason: result.stopReason,
            stats: {
              loadMs,
              ...result.stats,
              residentBytes: stats.residentBytes,
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
            `prefill ${s.prefillTokensPerSecond.toFixed(1)} tok/s, decode ${s.decodeTokensPerSecond.toFixed(1)} tok/s]`,
        );
      }
      return 0;
    } finally {
      engine.dispose();
    }
  },
});
