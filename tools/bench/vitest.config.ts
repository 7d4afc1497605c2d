import { sharedVitestConfig } from "../../vitest.shared.ts";

export default sharedVitestConfig();
