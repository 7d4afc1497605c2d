import type { ModelArchitecture } from "../architecture.js";
import { parseQwen3Config } from "./config.js";
import { kinds } from "./kinds.js";
import { describeQwen3 } from "./tensors.js";

/** The dense Qwen3 (Qwen3-0.6B .. 32B): QK-norm GQA attention in every layer, dense SwiGLU FFNs, no MTP. */
export const qwen3 = { name: "qwen3", parseConfig: parseQwen3Config, describe: describeQwen3, kinds } satisfies ModelArchitecture;
