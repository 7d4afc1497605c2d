import type { ModelArchitecture } from "../architecture.js";
import { parseQwen35Config } from "./config.js";
import { kinds } from "./kinds.js";
import { describeQwen35 } from "./tensors.js";

/** The dense Qwen3.5 (qwen35.md): gated full attention and Gated DeltaNet layers, dense SwiGLU FFNs, an optional MTP block. */
export const qwen35 = { name: "qwen35", parseConfig: parseQwen35Config, describe: describeQwen35, kinds } satisfies ModelArchitecture;
