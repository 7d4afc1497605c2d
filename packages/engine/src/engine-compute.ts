/**
 * What computes for an engine: the matmul provider of every weight (native CPU arm first, the
 * TypeScript reference last; `exact` is TypeScript only), the exact-kernel probe, and whether the
 * native step runs the forward (else the TypeScript specification). Every fallback says why in the
 * diagnostics.
 */
import type { ResolvedOptions } from "./engine-options.js";
import { EngineOptionError } from "./errors.js";
import { probeExactKernels } from "./model/exact-probe.js";
import type { MatmulProvider, Numerics } from "./model/matmul.js";
import { loadTtNative, type TtNative } from "./model/native-module.js";
import { selectProviders, typescriptProviders } from "./model/providers.js";
import { type ModelWeights, type PackedMatrix, withDrafterHeadRows } from "./model/weights.js";

/** The weights an engine runs (a reduced drafter head when `speculative.draftVocab` asks), and what computes them. */
export interface EngineCompute {
  weights: ModelWeights;
  /** the provider named per op (`stats().providers`) */
  opProviders: Record<string, string>;
  providersByWeight: Map<PackedMatrix, MatmulProvider>;
  /** the native addon when the native step runs the forward */
  native: TtNative | undefined;
}

/** Loads the native CPU arm when present; none (with the reason in diagnostics) otherwise. */
async function nativeProviders(numerics: Numerics, threads: number | undefined, diagnostics: string[]): Promise<MatmulProvider[]> {
  try {
    const { createNativeMatmulProviders } = await import("./model/native-provider.js");
    return await createNativeMatmulProviders(numerics, threads, diagnostics);
  } catch (error) {
    // a bad thread count is the caller's error, never a reason to run the slow path
    if ((error as { code?: unknown }).code === "KEEPQUANT_NATIVE_ARGUMENT") {
      throw new EngineOptionError("ENGINE_BAD_OPTION", (error as Error).message, { field: "threads", cause: error });
    }
    diagnostics.push(`native CPU provider unavailable (${(error as Error).message}); using the TypeScript reference`);
    return [];
  }
}

/** Chooses the providers and the step of `weights` under `resolved`. */
export async function chooseCompute(weights: ModelWeights, resolved: ResolvedOptions, diagnostics: string[]): Promise<EngineCompute> {
  const draftVocab = resolved.speculative?.draftVocab;
  if (draftVocab !== undefined && weights.drafter) {
    if (draftVocab > weights.vocab) {
      throw new EngineOptionError(
        "ENGINE_BAD_OPTION",
        `speculative.draftVocab ${draftVocab} is larger than the vocabulary (${weights.vocab} tokens)`,
        { field: "speculative.draftVocab" },
      );
    }
    weights = withDrafterHeadRows(weights, draftVocab);
  }
  const candidates: MatmulProvider[] = [];
  // `exact` is a TypeScript-only reference: no native arm computes it
  const wantsNative = resolved.provider === "auto" && resolved.numerics !== "exact";
  if (wantsNative) candidates.push(...(await nativeProviders(resolved.numerics, resolved.threads, diagnostics)));
  candidates.push(...typescriptProviders(resolved.numerics, diagnostics));
  const selection = selectProviders(
    weights,
    candidates,
    resolved.numerics,
    resolved.numerics === "llama" ? '; numerics "bf16" computes every type the quant package dequantizes' : "",
  );
  let exactFallback = false;
  if (resolved.exactKernels && resolved.numerics === "llama") {
    const before = diagnostics.length;
    probeExactKernels(weights, selection.byWeight, selection.opProviders, typescriptProviders("llama", diagnostics), diagnostics);
    exactFallback = diagnostics.length > before;
  }
  let native: TtNative | undefined;
  if (wantsNative && resolved.nativeStep) {
    const loaded = await loadTtNative();
    if (!loaded.native) diagnostics.push(`native step unavailable (${loaded.reason}); the TypeScript forward runs`);
    else if (exactFallback)
      diagnostics.push("native step off: a native kernel is not bit-exact with llama.cpp (see above); the TypeScript forward runs");
    else native = loaded.native;
  }
  return { weights, opProviders: { ...selection.opProviders }, providersByWeight: selection.byWeight, native };
}
