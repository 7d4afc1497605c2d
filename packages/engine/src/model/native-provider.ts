import type { MatmulProvider, Numerics } from "./matmul.js";
import type { PackedMatrix } from "./weights.js";

type TtNative = typeof import("@keepquant/tt-native");

const REGISTERED_ENCODINGS = new Set([8, 12, 13, 14]); // Q8_0, Q4_K, Q5_K, Q6_K

/**
 * The native CPU arm from @keepquant/tt-native, imported dynamically so the engine runs without it.
 * Throws (the engine catches it and says so once in its diagnostics) when the addon did not load.
 * `llama` numerics: matmulLlama (activations quantized to each type's vec_dot_type, integer dots).
 * `bf16` numerics: the cpu-native keep-quant provider for the registered encodings (chunk policy
 * included); every other type goes through the general dense matmul (llama.cpp numerics), as the
 * design says (no silent bf16 expansion of unregistered types).
 */
export async function createNativeMatmulProviders(
  numerics: Numerics,
  threads: number | undefined,
  diagnostics: string[],
): Promise<MatmulProvider[]> {
  if (numerics === "exact") throw new Error('numerics "exact" is TypeScript-only');
  const moduleName = "@keepquant/tt-native";
  const native = (await import(moduleName)) as TtNative;
  const status = native.nativeStatus();
  const addon = native.nativeAddon();
  if (!addon) throw new Error(`CPU arm did not load: ${status.cpu.reasons.join("; ") || "unknown reason"}`);
  if (threads !== undefined) native.setNativeThreads(threads);
  const isa = native.getNativeIsa();
  if (numerics === "llama") {
    const name = `cpu-native-llama-${isa}`;
    return [
      {
        name,
        supports: (type) => addon.vecDotType(type) >= 0,
        matmul(weight: PackedMatrix, x: Float32Array, m: number, y: Float32Array) {
          native.matmulLlama(
            weight as unknown as Parameters<TtNative["matmulLlama"]>[0],
            x.length === m * weight.cols ? x : x.subarray(0, m * weight.cols),
            m,
            y.length === m * weight.rows ? y : y.subarray(0, m * weight.rows),
          );
        },
      },
    ];
  }
  const provider = native.createNativeProvider();
  // registered encodings: the keep-quant contract (decode, round once to bf16, f32 accumulation)
  const contract: MatmulProvider = {
    name: `${provider.name}-${isa}`,
    supports: (type) => REGISTERED_ENCODINGS.has(type),
    matmul(weight, x, m, y) {
      provider.matmulBTQuantGrouped({
        x: x.length === m * weight.cols ? x : x.subarray(0, m * weight.cols),
        xGroups: 1,
        m,
        weight: { type: weight.type, groups: 1, rows: weight.rows, cols: weight.cols, data: weight.data },
        p: 1,
        out: y.length === m * weight.rows ? y : y.subarray(0, m * weight.rows),
      });
    },
  };
  // every other type: the general dense matmul (llama.cpp numerics), never a silent bf16 expansion
  const general: MatmulProvider = {
    name: `cpu-native-llama-${isa}`,
    supports: (type) => !REGISTERED_ENCODINGS.has(type) && addon.vecDotType(type) >= 0,
    matmul(weight, x, m, y) {
      native.matmulLlama(
        weight as unknown as Parameters<TtNative["matmulLlama"]>[0],
        x.length === m * weight.cols ? x : x.subarray(0, m * weight.cols),
        m,
        y.length === m * weight.rows ? y : y.subarray(0, m * weight.rows),
      );
    },
  };
  void diagnostics;
  return [contract, general];
}
