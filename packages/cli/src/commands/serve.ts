import { existsSync } from "node:fs";
import path from "node:path";
import { cpuAvailableMemory, Engine, type EngineOptions, formatGiB, type KvType } from "@keepquant/engine";
import { architectureOf, readGgufModel } from "@keepquant/gguf";
import {
  createKeepquantServer,
  DEFAULT_CONTEXT_TOKENS,
  DEFAULT_DRAIN_TIMEOUT_MS,
  DEFAULT_IMAGE_FETCH_TIMEOUT_MS,
  DEFAULT_MAX_IMAGE_BYTES,
  DEFAULT_MAX_QUEUE,
  DEFAULT_MEMORY_BUDGET_SHARE,
  MAX_DRAIN_TIMEOUT_MS,
  MAX_PLANNED_SEQUENCES,
  parseByteSize,
  planCapacity,
} from "@keepquant/server";
import { CliUsageError, defineCommand, write, type CommandIo } from "../command.js";
import { refuseUnlessFitsCpu } from "../residency-check.js";
import { defaultModelInfo, defaultModelPath } from "@keepquant/default-model";
import { localModelFile } from "../hub-model.js";
import { ENGINE_OPTIONS, resolveGrammarLimits, resolveSpeculative } from "./engine-options.js";
import { parseIntegerOption, parseNumberOption } from "./numeric-option.js";
import { parseThinkingBudget } from "./run.js";
import { applyThreadCount, parseThreadCount } from "./threads.js";

/** Prefix-cache snapshots `serve` keeps by default (each one: KV blocks of a prompt prefix plus a GDN state copy). */
export const DEFAULT_PREFIX_CACHE_SNAPSHOTS = 8;
/** The environment variable of --memory-budget (the flag wins). */
export const KEEPQUANT_MEMORY_BUDGET = "KEEPQUANT_MEMORY_BUDGET";
/** The environment variable of --api-key (the flag wins; empty is unset). */
export const KEEPQUANT_API_KEY = "KEEPQUANT_API_KEY";

/**
 * One character an HTTP header value can carry: tab, space, visible ASCII, and latin-1's 0x80 .. 0xFF (a
 * header value is bytes; Node reads them as latin-1 and refuses to send anything else).
 */
const HEADER_VALUE_CHARACTER = /^[\t\x20-\x7e\x80-\xff]$/;

/**
 * Why `key` can never authenticate a request, or undefined when it can. The server compares it with the
 * `Authorization: Bearer` value it receives, trimmed; a header carries latin-1 text without control
 * characters. The reason never quotes the key (it is a secret).
 */
export function apiKeyProblem(key: string): string | undefined {
  if (key === "") return "empty (to serve without a key, leave the option out)";
  if (key !== key.trim()) {
    return "the key starts or ends with whitespace, and the server trims the key a request sends, so it could never match";
  }
  let position = 0;
  for (const char of key) {
    position++;
    if (HEADER_VALUE_CHARACTER.test(char)) continue;
    const codePoint = char.codePointAt(0)!;
    const what = codePoint > 0xff ? "not latin-1" : "a control character";
    return (
      `character ${position} of the key (U+${codePoint.toString(16).toUpperCase().padStart(4, "0")}) is ${what}: ` +
      "an HTTP header carries only latin-1 text without control characters, so no request could send this key"
    );
  }
  return undefined;
}

/** The API key from --api-key, else KEEPQUANT_API_KEY (empty: none); a usage error naming its source when no request could match it. */
export function resolveApiKey(flag: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  const fromEnv = env[KEEPQUANT_API_KEY] || undefined;
  const key = flag ?? fromEnv;
  if (key === undefined) return undefined;
  const problem = apiKeyProblem(key);
  if (problem) throw new CliUsageError(`${flag !== undefined ? "--api-key" : KEEPQUANT_API_KEY}: ${problem}`);
  return key;
}

export const command = defineCommand({
  name: "serve",
  summary:
    "serve a qwen35 GGUF model over HTTP (OpenAI chat completions and Responses, Anthropic Messages), with metrics and a web chat page",
  usage:
    "serve [model.gguf] [--host 127.0.0.1] [--port 8080] [--api-key K] [--ctx N] [--memory-budget SIZE] [--max-seqs N] [--kv-tokens N] [--max-queue N] [--numerics llama|bf16] [--threads N] [--kv-type f16|f32] [--flash-attn on|off] [--no-prefix-cache] [--speculative mtp [--draft-tokens K] [--draft-vocab N]] [--thinking-budget N] [--mmproj FILE [--allow-image-urls] [--max-image-size SIZE] [--image-fetch-timeout S]] [--no-webui] [--force]",
  help: [
    "--host H               address to listen on (default 127.0.0.1, loopback only)",
    "--port P               port (default 8080; 0 = any free port)",
    `--api-key K            require Authorization: Bearer K or x-api-key: K (or ${KEEPQUANT_API_KEY}): latin-1 text, no control characters, no whitespace at its ends; /health and the web page stay open`,
    `--ctx N                most tokens per request, prompt + answer (default ${DEFAULT_CONTEXT_TOKENS}, at most the model's context_length)`,
    `--memory-budget SIZE   memory the engine may use, e.g. 4GiB (or ${KEEPQUANT_MEMORY_BUDGET}; default ${DEFAULT_MEMORY_BUDGET_SHARE * 100}% of the available memory): sizes --max-seqs and --kv-tokens`,
    `--max-seqs N           sequences computed at once, 1 .. 256 (default: the most the budget holds, at most ${MAX_PLANNED_SEQUENCES})`,
    "--kv-tokens N          KV cache tokens shared by the sequences (default: --ctx per sequence)",
    `--max-queue N          requests waiting beyond those before 429 (default ${DEFAULT_MAX_QUEUE})`,
    "--numerics MODE        llama (default) or bf16",
    "--threads N            threads for the native provider: 1 .. 4x the logical cores (--force: up to 1024)",
    "--kv-type T            KV cache type f16 (default) or f32 (llama.cpp's -ctk/-ctv)",
    "--flash-attn on|off    attention numerics of llama.cpp's -fa (default on)",
    `--prefix-cache N       prefix-cache snapshots (default ${DEFAULT_PREFIX_CACHE_SNAPSHOTS}); --no-prefix-cache turns it off`,
    "--speculative mtp      speculative decoding with the model's MTP drafter block (greedy output unchanged)",
    "--draft-tokens K       tokens drafted per step with --speculative: 1 .. 8 (default 3)",
    "--draft-vocab N        cheaper drafter: its head scores token ids 0 .. N-1 only (default: the whole vocabulary)",
    "--thinking-budget N    default thinking budget of chat requests that send no thinking_budget (reasoning tokens before </think>)",
    "--mmproj FILE          a vision projector (mmproj GGUF) for the model: requests may send images (image_url, image, input_image parts)",
    "--allow-image-urls     fetch http(s) image URLs requests send (default: only data: URLs / base64; a URL is a 400)",
    `--max-image-size SIZE  largest image a request may send or the server fetch, e.g. 8MiB (default ${DEFAULT_MAX_IMAGE_BYTES / 1024 / 1024}MiB)`,
    `--image-fetch-timeout S  seconds one image URL fetch may take (default ${DEFAULT_IMAGE_FETCH_TIMEOUT_MS / 1000})`,
    "--no-webui             do not serve the web chat page on /",
    "--model-name NAME      model id in /v1/models (default: the file name)",
    `--drain-timeout S      seconds SIGINT/SIGTERM wait for in-flight requests: 0 .. ${MAX_DRAIN_TIMEOUT_MS / 1000} (default ${DEFAULT_DRAIN_TIMEOUT_MS / 1000})`,
    "--grammar-max-repetition N   longest maxLength (or EBNF {m,n}) a response_format or tool schema may ask for (default 256; more is a 400)",
    "--grammar-compile-timeout S  seconds a schema's compile may take before the request gets a 400 (default 30)",
    "--force                serve even when the planner says the model does not fit in available memory (and allow --threads up to 1024)",
    "without model.gguf: the embedded default model (@keepquant/default-model)",
  ],
  options: {
    ...ENGINE_OPTIONS,
    host: { type: "string" },
    port: { type: "string" },
    "api-key": { type: "string" },
    "max-seqs": { type: "string" },
    "kv-tokens": { type: "string" },
    "memory-budget": { type: "string" },
    "max-queue": { type: "string" },
    "prefix-cache": { type: "string" },
    "no-prefix-cache": { type: "boolean" },
    "no-webui": { type: "boolean" },
    "model-name": { type: "string" },
    "drain-timeout": { type: "string" },
    "thinking-budget": { type: "string" },
    mmproj: { type: "string" },
    "allow-image-urls": { type: "boolean" },
    "max-image-size": { type: "string" },
    "image-fetch-timeout": { type: "string" },
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    if (positionals.length > 1) throw new CliUsageError(`expected at most one model file, got ${positionals.length}`);
    const host = values.host ?? "127.0.0.1";
    const port = parseIntegerOption("port", values.port, { min: 0, max: 65535 }) ?? 8080;
    const numerics = values.numerics ?? "llama";
    if (numerics !== "llama" && numerics !== "bf16")
      throw new CliUsageError(`--numerics ${JSON.stringify(numerics)}: expected llama or bf16`);
    const kvType = (values["kv-type"] ?? "f16") as KvType;
    if (kvType !== "f16" && kvType !== "f32") throw new CliUsageError(`--kv-type ${JSON.stringify(kvType)}: expected f16 or f32`);
    const flashAttn = values["flash-attn"] ?? "on";
    if (flashAttn !== "on" && flashAttn !== "off") throw new CliUsageError(`--flash-attn ${JSON.stringify(flashAttn)}: expected on or off`);
    const threadCount = await parseThreadCount(values.threads, values.force === true);
    const threads = threadCount.threads;
    const explicitSeqs = parseIntegerOption("max-seqs", values["max-seqs"], { min: 1, max: 256 });
    const explicitKvTokens = parseIntegerOption("kv-tokens", values["kv-tokens"], { min: 16 });
    const budgetText = values["memory-budget"] ?? (io.env[KEEPQUANT_MEMORY_BUDGET] || undefined);
    const budgetName = values["memory-budget"] !== undefined ? "--memory-budget" : KEEPQUANT_MEMORY_BUDGET;
    const givenBudget = budgetText === undefined ? undefined : parseByteSize(budgetText);
    if (budgetText !== undefined && givenBudget === undefined)
      throw new CliUsageError(
        `${budgetName} ${JSON.stringify(budgetText)}: expected a size in bytes, e.g. 4GiB, 512MiB, 2GB or 1073741824`,
      );
    const maxQueue = parseIntegerOption("max-queue", values["max-queue"], { min: 0 }) ?? DEFAULT_MAX_QUEUE;
    const requestedCtx = parseIntegerOption("ctx", values.ctx, { min: 16 });
    if (values["no-prefix-cache"] && values["prefix-cache"] !== undefined)
      throw new CliUsageError("give --prefix-cache N or --no-prefix-cache, not both");
    const speculative = resolveSpeculative(values);
    const grammarLimits = resolveGrammarLimits(values);
    const snapshots = values["no-prefix-cache"]
      ? 0
      : (parseIntegerOption("prefix-cache", values["prefix-cache"], { min: 0 }) ?? DEFAULT_PREFIX_CACHE_SNAPSHOTS);
    const thinkingBudget = parseThinkingBudget(values["thinking-budget"]);
    // Node's timers hold at most 2^31 - 1 ms: a longer drain would fire after 1 ms (TimeoutOverflowWarning)
    const drainSeconds =
      parseNumberOption("drain-timeout", values["drain-timeout"], {
        min: 0,
        max: MAX_DRAIN_TIMEOUT_MS / 1000,
        rule: `a number of seconds in [0, ${MAX_DRAIN_TIMEOUT_MS / 1000}] (Node's timer maximum, 2^31 - 1 ms)`,
      }) ?? DEFAULT_DRAIN_TIMEOUT_MS / 1000;
    // before the model loads: a key no request can send is a usage error, not a server that refuses everyone
    const apiKey = resolveApiKey(values["api-key"], io.env);
    const images = resolveImageOptions(values);
    if (images.projector !== undefined && !existsSync(images.projector))
      throw new CliUsageError(`--mmproj ${JSON.stringify(images.projector)}: no such file`);

    const isDefault = positionals.length === 0;
    const synthetic = isDefault && defaultModelInfo().synthetic;
    let modelPath: string;
    if (isDefault) {
      const info = defaultModelInfo();
      write(
        io.stderr,
        `keepquant: no model given, serving the embedded ${info.synthetic ? "SYNTHETIC " : ""}qwen35 model ${info.name} (${info.description})`,
      );
      modelPath = await defaultModelPath();
    } else {
      modelPath = await localModelFile(positionals[0]!, io);
    }
    // the context: --ctx, else the default, never above the model's own context_length
    const header = await readGgufModel(modelPath);
    const modelContext = architectureOf(header).parseConfig(header).contextLength;
    if (requestedCtx !== undefined && requestedCtx > modelContext) {
      throw new CliUsageError(`--ctx ${requestedCtx}: the model's context_length is ${modelContext}`);
    }
    const ctx = requestedCtx ?? Math.min(DEFAULT_CONTEXT_TOKENS, modelContext);
    const modelName = values["model-name"] ?? (isDefault ? defaultModelId() : path.basename(modelPath).replace(/\.gguf$/i, ""));

    if (explicitKvTokens !== undefined && explicitKvTokens < ctx)
      throw new CliUsageError(`--kv-tokens ${explicitKvTokens}: at least the context (--ctx ${ctx}), or one request could not fit`);
    // concurrency and KV cache from the planner and the budget; explicit --max-seqs / --kv-tokens win
    const available = givenBudget === undefined ? cpuAvailableMemory() : undefined;
    const budget = givenBudget ?? Math.max(1, Math.floor(available!.bytes * DEFAULT_MEMORY_BUDGET_SHARE));
    const memoryOptions: Omit<EngineOptions, "maxSequences" | "kvCacheTokens"> = {
      numerics: numerics as "llama" | "bf16",
      kvType,
      flashAttention: flashAttn === "on",
      prefixCacheSnapshots: snapshots,
      ...(speculative ? { speculative } : {}),
    };
    const capacity = planCapacity({
      file: header,
      contextTokens: ctx,
      memoryBudgetBytes: budget,
      engine: memoryOptions,
      ...(explicitSeqs === undefined ? {} : { maxSequences: explicitSeqs }),
      ...(explicitKvTokens === undefined ? {} : { kvCacheTokens: explicitKvTokens }),
    });
    const maxSeqs = capacity.maxSequences;
    const why =
      capacity.limitedBy === "explicit"
        ? "--max-seqs"
        : capacity.limitedBy === "cap"
          ? `the cap of ${MAX_PLANNED_SEQUENCES}`
          : "what the budget holds";
    write(
      io.stderr,
      `keepquant serve: capacity: ${maxSeqs} sequences (${why}), KV cache ${capacity.kvCacheTokens} tokens${explicitKvTokens === undefined ? "" : " (--kv-tokens)"}, planned ${formatGiB(capacity.plannedBytes)} of a ${formatGiB(budget)} budget (${givenBudget === undefined ? `${DEFAULT_MEMORY_BUDGET_SHARE * 100}% of ${formatGiB(available!.bytes)} available` : budgetName})${capacity.fits ? "" : ": over the budget"}`,
    );
    const options: EngineOptions = {
      numerics,
      kvType,
      flashAttention: flashAttn === "on",
      maxSequences: maxSeqs,
      kvCacheTokens: capacity.kvCacheTokens,
      prefixCacheSnapshots: snapshots,
      ...(threads === undefined ? {} : { threads }),
      ...(speculative === undefined ? {} : { speculative }),
      ...(grammarLimits === undefined ? {} : { grammarLimits }),
      ...(images.projector === undefined ? {} : { projector: images.projector }),
    };
    // the planner first (header only): a model that cannot fit is refused before the port opens
    await refuseUnlessFitsCpu(modelPath, options, { force: values.force === true, io });
    await applyThreadCount(threadCount);
    // the grammar worker is started and its vocabulary tables built while /health says loading (about 0.8 s on a
    // 248,320-token vocabulary, off the event loop), so the first structured-output request does not wait for them
    const loading = Engine.load(modelPath, options).then(async (engine) => {
      if (engine.tokenizer) await engine.prepareConstraint({ type: "json_object" }).catch(() => undefined);
      return engine;
    });
    loading.catch(() => undefined);
    const server = createKeepquantServer({
      engine: loading,
      modelName,
      synthetic,
      ...(apiKey ? { apiKey } : {}),
      contextTokens: ctx,
      maxQueue,
      webui: values["no-webui"] !== true,
      drainTimeoutMs: Math.round(drainSeconds * 1000),
      capacity,
      ...(thinkingBudget === undefined ? {} : { thinkingBudget }),
      allowImageUrls: images.allowImageUrls,
      ...(images.maxImageBytes === undefined ? {} : { maxImageBytes: images.maxImageBytes }),
      ...(images.imageFetchTimeoutMs === undefined ? {} : { imageFetchTimeoutMs: images.imageFetchTimeoutMs }),
    });
    const address = await server.listen(port, host);
    const shown = address.family === "IPv6" ? `[${address.address}]` : address.address;
    write(io.stderr, `keepquant serve: listening on http://${shown}:${address.port} (loading ${modelName})`);
    if (!["127.0.0.1", "::1", "localhost"].includes(host) && !apiKey) {
      write(io.stderr, `warning: listening on ${host} without an API key: anyone who reaches this address can use the model`);
    }

    let stopping: Promise<void> | undefined;
    let signals = 0;
    const stopped = new Promise<number>((resolve) => {
      const onSignal = (signal: NodeJS.Signals): void => {
        signals++;
        if (signals > 1) {
          write(io.stderr, `keepquant serve: ${signal} again, aborting in-flight requests`);
          void server.close(0);
          return;
        }
        write(io.stderr, `keepquant serve: ${signal}, draining ${server.inFlight} request(s) (up to ${drainSeconds} s)`);
        stopping = server.close();
        void stopping.then(() => {
          process.off("SIGINT", onSignal);
          process.off("SIGTERM", onSignal);
          resolve(0);
        });
      };
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
    });

    let engine: Engine;
    try {
      engine = await loading;
    } catch (error) {
      await server.close(0);
      throw error;
    }
    const stats = engine.stats();
    write(
      io.stderr,
      `keepquant serve: ready: ${modelName} (${numerics} numerics, ${maxSeqs} sequences, ctx ${ctx}, ${stats.kv.blocksTotal} KV blocks of ${stats.kv.blockSize}, prefix cache ${snapshots > 0 ? `${snapshots} snapshots` : "off"}${engine.projector ? `, images${images.allowImageUrls ? " (and image URLs)" : ""}` : ""}${values["no-webui"] ? "" : ", web page on /"})`,
    );
    for (const line of stats.diagnostics) write(io.stderr, `note: ${line}`);
    const code = await stopped;
    engine.dispose();
    write(io.stderr, "keepquant serve: stopped");
    return code;
  },
});

/** The image options of `serve`: --mmproj, --allow-image-urls, --max-image-size, --image-fetch-timeout. */
export function resolveImageOptions(values: {
  mmproj?: string | undefined;
  "allow-image-urls"?: boolean | undefined;
  "max-image-size"?: string | undefined;
  "image-fetch-timeout"?: string | undefined;
}): { projector: string | undefined; allowImageUrls: boolean; maxImageBytes: number | undefined; imageFetchTimeoutMs: number | undefined } {
  const projector = values.mmproj;
  if (projector === "") throw new CliUsageError("--mmproj: expected the path of a vision projector GGUF (mmproj-*.gguf)");
  const sizeText = values["max-image-size"];
  const maxImageBytes = sizeText === undefined ? undefined : parseByteSize(sizeText);
  if (sizeText !== undefined && (maxImageBytes === undefined || maxImageBytes < 1))
    throw new CliUsageError(`--max-image-size ${JSON.stringify(sizeText)}: expected a size in bytes, e.g. 20MiB, 512KiB or 1048576`);
  const seconds = parseNumberOption("image-fetch-timeout", values["image-fetch-timeout"], {
    min: 0,
    max: MAX_DRAIN_TIMEOUT_MS / 1000,
    rule: `a number of seconds in [0, ${MAX_DRAIN_TIMEOUT_MS / 1000}]`,
  });
  const allowImageUrls = values["allow-image-urls"] === true;
  const imageOnly = allowImageUrls || sizeText !== undefined || seconds !== undefined;
  if (imageOnly && projector === undefined)
    throw new CliUsageError(
      "--allow-image-urls, --max-image-size and --image-fetch-timeout need --mmproj FILE (images need a vision projector)",
    );
  return {
    projector,
    allowImageUrls,
    maxImageBytes: maxImageBytes === undefined ? undefined : Math.floor(maxImageBytes),
    imageFetchTimeoutMs: seconds === undefined ? undefined : Math.round(seconds * 1000),
  };
}

/** The served id of the default model: its parity fixture's name when it is one, else its general.name. */
function defaultModelId(): string {
  const info = defaultModelInfo();
  return info.source.kind === "parity-fixture" ? info.source.fixture : info.name;
}
