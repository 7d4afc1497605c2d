/**
 * Engine options shared by `run`, `chat` and `parity`: parsed once, here, into EngineOptions.
 * llama.cpp's knobs keep llama.cpp's names and defaults: `--kv-type` is `-ctk/-ctv` (default f16),
 * `--flash-attn` is `-fa` (default on).
 */
import fs from "node:fs";
import { defaultModelInfo, defaultModelPath } from "@keepquant/default-model";
import type { EngineOptions } from "@keepquant/engine";
import { assertRegularFile } from "@keepquant/gguf";
import { CliUsageError } from "../command.js";

/** The option declarations (node:util parseArgs). */
export const ENGINE_OPTIONS = {
  threads: { type: "string" },
  force: { type: "boolean" },
  numerics: { type: "string" },
  ctx: { type: "string" },
  "kv-type": { type: "string" },
  "flash-attn": { type: "string" },
  speculative: { type: "string" },
  "draft-tokens": { type: "string" },
  "draft-vocab": { type: "string" },
} as const;

/** Help lines of ENGINE_OPTIONS, in the same column layout as the commands' own lines. */
export const ENGINE_OPTIONS_HELP: readonly string[] = [
  "--threads N           threads of the native provider: 1 .. 4x the logical cores (more needs --force)",
  "--force               load even when the planner says the model does not fit in memory, and allow --threads above 4x the logical cores (up to 1024)",
  "--numerics MODE       llama (default: llama.cpp's CPU numerics) or bf16 (the keep-quant contract)",
  "--ctx N               context length in tokens (default: the model's context_length)",
  "--kv-type TYPE        K/V cache type f16 (default, as llama.cpp) or f32 (llama.cpp's -ctk/-ctv)",
  "--flash-attn on|off   llama.cpp's -fa: flash attention numerics (default on)",
  "--speculative mtp     speculative decoding with the model's MTP drafter block (greedy output unchanged)",
  "--draft-tokens K      tokens drafted per step with --speculative: 1 .. 8 (default 3)",
  "--draft-vocab N       cheaper drafter: its head scores token ids 0 .. N-1 only (default: the whole vocabulary)",
];

/** The parsed values of ENGINE_OPTIONS. */
export interface EngineOptionValues {
  threads?: string | undefined;
  force?: boolean | undefined;
  numerics?: string | undefined;
  ctx?: string | undefined;
  "kv-type"?: string | undefined;
  "flash-attn"?: string | undefined;
  speculative?: string | undefined;
  "draft-tokens"?: string | undefined;
  "draft-vocab"?: string | undefined;
}

/** Parses --speculative / --draft-tokens / --draft-vocab into the engine's `speculative` option (undefined when off). */
export function resolveSpeculative(
  values: Pick<EngineOptionValues, "speculative" | "draft-tokens" | "draft-vocab">,
): EngineOptions["speculative"] {
  if (values.speculative === undefined) {
    if (values["draft-tokens"] !== undefined) throw new CliUsageError("--draft-tokens needs --speculative mtp");
    if (values["draft-vocab"] !== undefined) throw new CliUsageError("--draft-vocab needs --speculative mtp");
    return undefined;
  }
  if (values.speculative !== "mtp") throw new CliUsageError(`--speculative ${JSON.stringify(values.speculative)}: expected mtp`);
  const spec: EngineOptions["speculative"] & { method: "mtp" } = { method: "mtp" };
  const text = values["draft-tokens"];
  if (text !== undefined) {
    const k = /^\s*-?\d+\s*$/.test(text) ? Number(text) : Number.NaN;
    if (!Number.isInteger(k) || k < 1 || k > 8)
      throw new CliUsageError(`--draft-tokens ${JSON.stringify(text)}: expected an integer in 1 .. 8`);
    spec.draftTokens = k;
  }
  const vocabText = values["draft-vocab"];
  if (vocabText !== undefined) {
    const n = /^\s*-?\d+\s*$/.test(vocabText) ? Number(vocabText) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < 1)
      throw new CliUsageError(`--draft-vocab ${JSON.stringify(vocabText)}: expected a positive integer (at most the model's vocabulary)`);
    spec.draftVocab = n;
  }
  return spec;
}

/** The tt-native functions the thread policy needs (imported lazily: inspect never loads the addon). */
type TtNative = typeof import("@keepquant/tt-native");

/** The resolved options; `forcedThreads` is set on the native pool before the engine loads. */
export interface ResolvedEngineOptions {
  options: EngineOptions & { numerics: "llama" | "bf16" };
  forcedThreads: number | undefined;
}

function parseInteger(name: string, text: string, min: number): number {
  const value = /^\s*-?\d+\s*$/.test(text) ? Number(text) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < min)
    throw new CliUsageError(`--${name} ${JSON.stringify(text)}: expected an integer >= ${min}`);
  return value;
}

/**
 * Checks --threads against the native pool's policy (the same function the native arm applies,
 * so the CLI and the pool agree) and KEEPQUANT_NATIVE_THREADS, so that a bad thread count is a
 * usage error here instead of a native arm that does not load.
 */
async function resolveThreads(values: EngineOptionValues, env: NodeJS.ProcessEnv): Promise<{ threads?: number; forced?: number }> {
  const native = (await import("@keepquant/tt-native")) as TtNative;
  const fromEnv = env[native.KEEPQUANT_NATIVE_THREADS];
  if (fromEnv !== undefined && fromEnv !== "") {
    const problem = native.nativeThreadsProblem(/^\d+$/.test(fromEnv) ? Number(fromEnv) : Number.NaN);
    if (problem) throw new CliUsageError(`${native.KEEPQUANT_NATIVE_THREADS}=${JSON.stringify(fromEnv)}: ${problem}`);
  }
  if (values.threads === undefined) return {};
  const threads = /^\s*-?\d+\s*$/.test(values.threads) ? Number(values.threads) : Number.NaN;
  const problem = native.nativeThreadsProblem(threads, { force: values.force === true });
  if (problem) throw new CliUsageError(`--threads ${JSON.stringify(values.threads)}: ${problem}`);
  // Above the default cap the engine would refuse the count: the pool is sized here, once.
  if (native.nativeThreadsProblem(threads) !== undefined) return { forced: threads };
  return { threads };
}

/** Parses the shared engine options; throws CliUsageError naming the option and what is allowed. */
export async function resolveEngineOptions(values: EngineOptionValues, env: NodeJS.ProcessEnv): Promise<ResolvedEngineOptions> {
  const numerics = values.numerics ?? "llama";
  if (numerics !== "llama" && numerics !== "bf16")
    throw new CliUsageError(`--numerics ${JSON.stringify(numerics)}: expected llama or bf16`);
  const kvType = values["kv-type"] ?? "f16";
  if (kvType !== "f16" && kvType !== "f32") throw new CliUsageError(`--kv-type ${JSON.stringify(kvType)}: expected f16 or f32`);
  const flash = values["flash-attn"] ?? "on";
  if (flash !== "on" && flash !== "off") throw new CliUsageError(`--flash-attn ${JSON.stringify(flash)}: expected on or off`);
  const contextLength = values.ctx === undefined ? undefined : parseInteger("ctx", values.ctx, 1);
  const speculative = resolveSpeculative(values);
  const { threads, forced } = await resolveThreads(values, env);
  return {
    options: {
      ...(speculative === undefined ? {} : { speculative }),
      numerics,
      kvType,
      flashAttention: flash === "on",
      // an explicit context gets a KV pool that holds it
      ...(contextLength === undefined ? {} : { contextLength, kvCacheTokens: contextLength }),
      ...(threads === undefined ? {} : { threads }),
    },
    forcedThreads: forced,
  };
}

/** Sizes the native pool for a forced thread count (a no-op when the native arm did not load). */
export async function applyForcedThreads(resolved: ResolvedEngineOptions): Promise<void> {
  if (resolved.forcedThreads === undefined) return;
  const native = (await import("@keepquant/tt-native")) as TtNative;
  if (native.nativeAddon()) native.setNativeThreads(resolved.forcedThreads, { force: true });
}

/** The model a command runs: a file the user named, or the embedded default model. */
export interface ModelChoice {
  /** The file the engine loads. */
  file: string;
  /** True when no model was named: the embedded default of @keepquant/default-model. */
  isDefault: boolean;
  /** Said on stderr before loading (undefined for a named file). */
  notice: string | undefined;
}

/**
 * A model path the user named: MODEL_NOT_FOUND when nothing is there; a directory, FIFO, device or
 * socket is gguf's GGUF_NOT_A_FILE (from a stat: nothing is opened, so a FIFO cannot block). Every
 * command that takes a model file calls this first, so all of them give the same error line.
 */
export async function checkModelFile(file: string): Promise<void> {
  if (!fs.existsSync(file)) throw Object.assign(new Error(`model file not found: ${file}`), { code: "MODEL_NOT_FOUND" });
  await assertRegularFile(file);
}

/** Resolves `[model.gguf]`: the named file (MODEL_NOT_FOUND when absent) or the verified default model. */
export async function chooseModel(positionals: readonly string[]): Promise<ModelChoice> {
  if (positionals.length > 1) throw new CliUsageError(`expected at most one model file, got ${positionals.length}`);
  const named = positionals[0];
  if (named !== undefined) {
    await checkModelFile(named);
    return { file: named, isDefault: false, notice: undefined };
  }
  const info = defaultModelInfo();
  const file = await defaultModelPath();
  const kind = info.synthetic ? "SYNTHETIC qwen35 model" : "qwen35 model";
  return { file, isDefault: true, notice: `keepquant: no model given, using the embedded ${kind} ${info.name} (${info.description})` };
}
