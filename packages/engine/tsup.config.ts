import { sharedTsupConfig } from "../../tsup.shared.ts";

// one entry per public export: "." (the Engine API), "./parity" (the parity gate), "./bench" (the
// benchmark), "./testing" (dev tools' tokenizer fixtures; never imported by product code)
export default sharedTsupConfig({
  entry: { index: "src/index.ts", parity: "src/parity/index.ts", bench: "src/bench/index.ts", testing: "src/testing/index.ts" },
});
