import type { MatmulProvider, Numerics } from "./matmul.js";

/**
 * The native CPU arm from @keepquant/tt-native, loaded dynamically so the engine runs without it.
 * Throws (caught by the engine, which then says so once in its diagnostics) when unavailable.
 */
export async function createNativeMatmulProviders(
  numerics: Numerics,
  threads: number | undefined,
  diagnostics: string[],
): Promise<MatmulProvider[]> {
  const moduleName = "@keepquant/tt-native";
  const native = (await import(moduleName)) as Record<string, unknown>;
  void numerics;
  void threads;
  void diagnostics;
  if (typeof native.matmulLlama !== "function") throw new Error("@keepquant/tt-native exports no matmulLlama");
  return [];
}
