import type { MatmulProvider, Numerics } from "./matmul.js";

import { loadTtNative } from "./native-module.js";

/**
 * The native CPU arm's providers from @keepquant/tt-native, imported dynamically so the engine runs
 * without it. Throws (the engine catches it and says so once in its diagnostics) when the addon did
 * not load. Both implement @keepquant/quant's MatmulProvider at priority 100, named with the kernel
 * level: `cpu-native-llama-<isa>` (llama.cpp's numerics, `matmulLlama`) and `cpu-native-<isa>` (the
 * keep-quant contract for the registered encodings, chunk policy included). Selection picks per
 * weight by numerics, so a `bf16` model computes every other type in llama numerics (no silent bf16
 * expansion of unregistered types).
 */
export async function createNativeMatmulProviders(
  numerics: Numerics,
  threads: number | undefined,
  diagnostics: string[],
): Promise<MatmulProvider[]> {
  if (numerics === "exact") throw new Error('numerics "exact" is TypeScript-only');
  const { native, reason } = await loadTtNative();
  if (!native) throw new Error(reason);
  if (threads !== undefined) native.setNativeThreads(threads);
  const isa = native.getNativeIsa();
  void diagnostics;
  return [
    native.createNativeLlamaProvider({ name: `${native.CPU_NATIVE_LLAMA_PROVIDER_NAME}-${isa}` }),
    native.createNativeProvider({ name: `${native.CPU_NATIVE_PROVIDER_NAME}-${isa}` }),
  ];
}
