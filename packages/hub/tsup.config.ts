import { sharedTsupConfig } from "../../tsup.shared.ts";

// "." (hf: references, downloads, the cache) and "./testing" (the loopback mock Hub the tests start; never
// imported by product code)
export default sharedTsupConfig({ entry: { index: "src/index.ts", testing: "src/testing/index.ts" } });
