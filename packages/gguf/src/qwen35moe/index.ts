import type { ModelArchitecture } from "../architecture.js";
import { parseQwen35Config } from "../qwen35/config.js";
import { describeQwen35 } from "../qwen35/tensors.js";
import { kinds } from "./kinds.js";

/**
 * Qwen3.5's MoE sibling: qwen35's token mixers and layout with the MoE FFN (./kinds.ts). Its
 * hyperparameters are qwen35's plus the expert counts, read by the same parser under its own prefix.
 */
export const qwen35moe = { name: "qwen35moe", parseConfig: parseQwen35Config, describe: describeQwen35, kinds } satisfies ModelArchitecture;
