/** What the package exports of qwen3 (one line in ../index.ts). */
export { parseQwen3Config } from "./config.js";
export { QWEN3_0_6B_SHAPE, QWEN3_TEST_SHAPE, type Qwen3Spec, qwen3Metadata, synthesizeQwen3 } from "./synthetic.js";
export { describeQwen3, qwen3Dims } from "./tensors.js";
