/**
 * The tsup config the packages share: ESM for Node 20 with declarations and source maps, a clean dist, one
 * entry (src/index.ts) unless the package names its own. A package's tsup.config.ts passes only what it does
 * otherwise (tsup's own options, which replace the shared ones).
 */
import { defineConfig, type Options } from "tsup";

export function sharedTsupConfig(options: Options = {}) {
  return defineConfig({
    entry: ["src/index.ts"],
    format: ["esm"],
    dts: true,
    clean: true,
    sourcemap: true,
    target: "node20",
    ...options,
  });
}
