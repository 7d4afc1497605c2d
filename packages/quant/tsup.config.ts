import { sharedTsupConfig } from "../../tsup.shared.ts";

export default sharedTsupConfig({ entry: { index: "src/index.ts", "testing/index": "src/testing/index.ts" } });
