import { sharedVitestConfig } from "../../vitest.shared.ts";

export default sharedVitestConfig({ testTimeout: 300_000, hookTimeout: 600_000 });
