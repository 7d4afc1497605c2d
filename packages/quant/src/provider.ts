/**
 * The one provider interface of keepquant's matmuls. Every provider computes the same operation,
 * `MatmulBTQuantGrouped(x, W, ids) -> y` over weights kept in their GGUF encoding (E = 1 is the
 * dense case), in one numerics mode: the keep-quant contract (`bf16`) is one of them. Providers are
 * ranked by priority (highest first), ties broken by name, so the choice is deterministic, and the
 * chosen provider is named wherever a caller reports it.
 */
import type { GgmlType } from "@keepquant/gguf";
import { QuantArgumentError } from "./errors.js";
import { isKeepQuantEncoding, type MatmulBTQuantGroupedArgs, type MatmulBTQuantGroupedShape, type PackedWeight } from "./contract.js";

/**
 * How a provider computes.
 * - `bf16`: the keep-quant contract: each weight row decoded, rounded once to bf16 (RNE), f32
 *   multiply and accumulate. Registered encodings only (KEEPQUANT_ENCODINGS).
 * - `llama`: llama.cpp's CPU numerics: each activation row converted to the weight type's
 *   vec_dot_type (Q8_K, Q8_0, Q8_1, f16, bf16 or f32), integer block dots, ggml's scale arithmetic.
 * - `exact`: weights decoded exactly, f32 activations, no rounding but the final one (a test and
 *   diagnostic reference).
 */
export type MatmulNumerics = "bf16" | "llama" | "exact";

/** A provider of MatmulBTQuantGrouped in one numerics mode. */
export interface MatmulProvider {
  /** Unique among the providers offered together; reported wherever a choice is observable. */
  readonly name: string;
  /** Higher runs first; equal priorities are ordered by name. The TypeScript reference tier is 0. */
  readonly priority: number;
  readonly numerics: MatmulNumerics;
  /** True when this provider computes weights of `type` in its numerics (selection asks this). */
  supports(type: GgmlType): boolean;
  /**
   * y [P, M, N] = x [Pa, M, K] times the selected [N, K] groups of W, transposed. Writes into
   * `args.out` when given and returns it. A type the provider does not support is refused with a
   * typed error naming the type and the op (the contract's message for `bf16` providers).
   */
  matmulBTQuantGrouped(args: MatmulBTQuantGroupedArgs): Float32Array;
}

/** A provider of the keep-quant contract: the `bf16` numerics over the registered encodings. */
export type KeepQuantProvider = MatmulProvider & { readonly numerics: "bf16" };

/** Priority order: higher priority first, then name (code-unit order, locale independent). */
export function compareProviders(a: MatmulProvider, b: MatmulProvider): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/** The providers in priority order; two providers with one name are refused (never dropped silently). */
export function rankProviders(providers: readonly MatmulProvider[]): MatmulProvider[] {
  const seen = new Set<string>();
  for (const provider of providers) {
    if (seen.has(provider.name)) {
      throw new QuantArgumentError("rankProviders", "providers", `two providers are named ${JSON.stringify(provider.name)}`);
    }
    seen.add(provider.name);
  }
  return [...providers].sort(compareProviders);
}

/**
 * The numerics a weight of `type` is computed in when a model runs in `mode`: the `bf16` mode is
 * the keep-quant contract for the registered encodings and llama.cpp's numerics for every other
 * type (never a silent bf16 expansion of an unregistered encoding); other modes are uniform.
 */
export function matmulNumericsFor(mode: MatmulNumerics, type: GgmlType): MatmulNumerics {
  return mode === "bf16" && !isKeepQuantEncoding(type) ? "llama" : mode;
}

/** The highest-ranked provider of `numerics` that supports `type`, or undefined. */
export function selectProvider(providers: readonly MatmulProvider[], numerics: MatmulNumerics, type: GgmlType): MatmulProvider | undefined {
  return rankProviders(providers).find((p) => p.numerics === numerics && p.supports(type));
}

/**
 * The dense case E = 1, P = 1: y [M, N] = x [M, K] W^T. `x` may be longer than M K and `out`
 * longer than M N (only the leading rows are read and written). Returns the [M, N] view of out.
 */
export function matmulDense(provider: MatmulProvider, weight: PackedWeight, x: Float32Array, m: number, out: Float32Array): Float32Array {
  const xRows = x.length === m * weight.cols ? x : x.subarray(0, m * weight.cols);
  const yRows = out.length === m * weight.rows ? out : out.subarray(0, m * weight.rows);
  return provider.matmulBTQuantGrouped({ x: xRows, xGroups: 1, m, weight, p: 1, out: yRows });
}

/**
 * Runs a checked grouped call as P dense products, for providers whose kernel is a dense matmul:
 * `dense(weight, x, y)` gets output p's group of W as a one-group weight (the caller's object
 * itself when E = 1), x [M, K] of its activation group and y [M, N] of the output. Returns y.
 */
export function runDenseGroups(
  args: MatmulBTQuantGroupedArgs,
  shape: MatmulBTQuantGroupedShape,
  dense: (weight: PackedWeight, x: Float32Array, y: Float32Array) => void,
): Float32Array {
  const { e, n, k, m, p, pa, groupBytes, groupOf } = shape;
  const out = args.out ?? new Float32Array(p * m * n);
  for (let pi = 0; pi < p; pi++) {
    const g = groupOf[pi]!;
    const weight =
      e === 1 ? args.weight : { ...args.weight, groups: 1, data: args.weight.data.subarray(g * groupBytes, (g + 1) * groupBytes) };
    const xGroup = pa === 1 ? 0 : pi;
    const x = pa === 1 && p === 1 ? args.x : args.x.subarray(xGroup * m * k, (xGroup + 1) * m * k);
    const y = p === 1 ? out : out.subarray(pi * m * n, (pi + 1) * m * n);
    dense(weight, x, y);
  }
  return out;
}
