import { sharedVitestConfig } from "../../vitest.shared.ts";

// vitest's own default timeouts
export default sharedVitestConfig({ testTimeout: 5_000, hookTimeout: 10_000 });
