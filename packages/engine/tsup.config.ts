import { defineConfig } from "tsup";

export default defineConfig({
  // one entry per public export: "." (the Engine API), "./parity" (the parity gate), "./bench" (the
  // benchmark), "./testing" (dev tools' tokenizer fixtures; never imported by product code)
  entry: { index: "src/index.ts", parity: "src/parity/index.ts", bench: "src/bench/index.ts", testing: "src/testing/index.ts" },
  format: ["esm"],
  dts: true,
  clean: true,
  sourcemap: true,
  target: "node20",
});
