/**
 * The native step's decode tuning at load: the model's decode matmul weights handed to
 * @keepquant/tt-native's tuner (the layers' dense matmuls and the head; stacked MoE experts keep the
 * layer choice of their type), its report kept for `engine.stats().tuning`.
 */
import { GGML_TYPE_TRAITS } from "@keepquant/gguf";
import type { DecodeTuning, EngineOptions } from "../engine-types.js";
import type { Numerics } from "./matmul.js";
import type { TtNative } from "./native-module.js";
import { allMatrices } from "./providers.js";
import type { ModelWeights } from "./weights.js";

/** The tuner's report for these weights (undefined with `tune: false`); applies the choice to the addon. */
export function tuneNativeDecode(
  native: TtNative,
  weights: ModelWeights,
  options: { numerics: Numerics; tune: NonNullable<EngineOptions["tune"]> },
): DecodeTuning | undefined {
  if (options.tune === false) {
    native.resetNativeDecodeVariants();
    return undefined;
  }
  const heads = new Set([weights.output, ...(weights.drafter ? [weights.drafter.head] : [])]);
  const matrices = allMatrices(weights)
    .filter((w) => w.groups === 1 && native.nativeVecDotType(w.type) !== undefined)
    // bf16 numerics compute the registered encodings through the contract kernels, not these
    .filter((w) => options.numerics !== "bf16" || !GGML_TYPE_TRAITS[w.type]?.keepQuantRegistered)
    .map((w) => ({
      role: heads.has(w) ? ("head" as const) : ("layer" as const),
      type: w.type,
      rows: w.rows,
      cols: w.cols,
      rowBytes: w.rowBytes,
      data: w.data,
    }));
  const tune = typeof options.tune === "object" ? options.tune : {};
  return native.tuneNativeDecode(matrices, {
    ...(tune.budgetMs !== undefined ? { budgetMs: tune.budgetMs } : {}),
    ...(tune.force ? { force: true } : {}),
  });
}
