/**
 * The 27B gate on CPU (`pnpm gate:27b`): the gate run of gate-run.ts (llama.cpp and keepquant, each in
 * its own process, 4 fixed prompts x 8 tokens, parity, load time, tok/s and peak RSS; exit 0 / 1 / 2 /
 * 77) on the synthetic Qwen3.5-27B-shape Q4_K_M file (fixture.ts).
 *
 *   pnpm gate:27b                  # generates the file first when it is not cached
 *   pnpm gate:27b -- --threads 2
 */
import { runGate } from "./gate-run.js";
import { GATE_27B } from "./fixture.js";

await runGate(GATE_27B);
