import { sharedTsupConfig } from "../../tsup.shared.ts";

// one entry per public export: "." (the Engine API), "./parity" (the parity gate), "./bench" (the
// benchmark), "./spec" (the TypeScript forward's matmul building blocks, for diagnostics), "./testing"
// (dev tools' tokenizer fixtures; never imported by product code)
export default sharedTsupConfig({
  entry: {
    index: "src/index.ts",
    parity: "src/parity/index.ts",
    bench: "src/bench/index.ts",
    spec: "src/spec.ts",
    testing: "src/testing/index.ts",
  },
});
