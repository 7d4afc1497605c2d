import { sharedVitestConfig } from "../../vitest.shared.ts";

// The 64-layer oracle and resume tests take 17-20 s alone but over 120 s on 2 loaded cores: the limit is a
// hang guard, not a speed check, so it is 10 minutes here.
export default sharedVitestConfig({ testTimeout: 600_000, hookTimeout: 600_000 });
