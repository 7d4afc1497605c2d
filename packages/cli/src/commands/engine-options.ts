/**
 * Engine options shared by `run`, `chat` and `parity`: parsed once, here, into EngineOptions.
 * llama.cpp's knobs keep llama.cpp's names and defaults: `--kv-type` is `-ctk/-ctv` (default f16),
 * `--flash-attn` is `-fa` (default on).
 */
import { defaultModelInfo, defaultModelPath } from "@keepquant/default-model";
import type { EngineOptions } from "@keepquant/engine";
import { CliUsageError, type CommandIo } from "../command.js";
import { localModelFile } from "../hub-model.js";
import { decimalInteger, parseIntegerOption, parseNumberOption } from "./numeric-option.js";

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
  "grammar-max-repetition": { type: "string" },
  "grammar-compile-timeout": { type: "string" },
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
  "--grammar-max-repetition N   longest maxLength (or EBNF {m,n}) a schema or grammar may ask for (default 256)",
  "--grammar-compile-timeout S  seconds a schema's compile may take before it is refused (default 30)",
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
  "grammar-max-repetition"?: string | undefined;
  "grammar-compile-timeout"?: string | undefined;
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
  const draftTokens = parseIntegerOption("draft-tokens", values["draft-tokens"], { min: 1, max: 8 });
  if (draftTokens !== undefined) spec.draftTokens = draftTokens;
  const draftVocab = parseIntegerOption("draft-vocab", values["draft-vocab"], {
    min: 1,
    rule: "a positive integer (at most the model's vocabulary)",
  });
  if (draftVocab !== undefined) spec.draftVocab = draftVocab;
  return spec;
}

/** The tt-native functions the thread policy needs (imported lazily: inspect never loads the addon). */
type TtNative = typeof import("@keepquant/tt-native");

/** The resolved options; `forcedThreads` is set on the native pool before the engine loads. */
export interface ResolvedEngineOptions {
  options: EngineOptions & { numerics: "llama" | "bf16" };
  forcedThreads: number | undefined;
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
    const problem = native.nativeThreadsProblem(decimalInteger(fromEnv));
    if (problem) throw new CliUsageError(`${native.KEEPQUANT_NATIVE_THREADS}=${JSON.stringify(fromEnv)}: ${problem}`);
  }
  if (values.threads === undefined) return {};
  const threads = decimalInteger(values.threads);
  const problem = native.nativeThreadsProblem(threads, { force: values.force === true });
  if (problem) throw new CliUsageError(`--threads ${JSON.stringify(values.threads)}: ${problem}`);
  // Above the default cap the engine would refuse the count: the pool is sized here, once.
  if (native.nativeThreadsProblem(threads) !== undefined) return { forced: threads };
  return { threads };
}

/**
 * --grammar-max-repetition and --grammar-compile-timeout as the engine's `grammarLimits` (undefined when neither
 * is given). A larger repetition bound raises the sum of repetitions with it (eight strings of the longest bound).
 */
export function resolveGrammarLimits(
  values: Pick<EngineOptionValues, "grammar-max-repetition" | "grammar-compile-timeout">,
): EngineOptions["grammarLimits"] {
  const maxRepetition = parseIntegerOption("grammar-max-repetition", values["grammar-max-repetition"], { min: 1 });
  const compileTimeout = parseNumberOption("grammar-compile-timeout", values["grammar-compile-timeout"], {
    min: 0,
    minExclusive: true,
    max: 2147483.647,
    rule: "a number of seconds in (0, 2147483.647]",
  });
  if (maxRepetition === undefined && compileTimeout === undefined) return undefined;
  return {
    ...(maxRepetition === undefined ? {} : { maxRepetition, maxRepetitionSum: Math.max(8 * maxRepetition, 2048) }),
    ...(compileTimeout === undefined ? {} : { compileTimeoutMs: Math.max(1, Math.round(compileTimeout * 1000)) }),
  };
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
  const contextLength = parseIntegerOption("ctx", values.ctx, { min: 1 });
  const speculative = resolveSpeculative(values);
  const grammarLimits = resolveGrammarLimits(values);
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
      ...(grammarLimits === undefined ? {} : { grammarLimits }),
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

/** Resolves `[model.gguf]`: the named file (checked by checkModelFile) or the verified default model. */
export async function chooseModel(positionals: readonly string[], io: CommandIo): Promise<ModelChoice> {
  if (positionals.length > 1) throw new CliUsageError(`expected at most one model file, got ${positionals.length}`);
  const named = positionals[0];
  if (named !== undefined) {
    return { file: await localModelFile(named, io), isDefault: false, notice: undefined };
  }
  const info = defaultModelInfo();
  const file = await defaultModelPath();
  const kind = info.synthetic ? "SYNTHETIC qwen35 model" : "qwen35 model";
  return { file, isDefault: true, notice: `keepquant: no model given, using the embedded ${kind} ${info.name} (${info.description})` };
}
