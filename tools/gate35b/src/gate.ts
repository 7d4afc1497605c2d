/**
 * The 35B-A3B gate on CPU (`pnpm gate:35b`): the 27B gate's run (tools/gate27b/src/gate-run.ts, the
 * same worker) on the synthetic Qwen3.5-35B-A3B-shape qwen35moe Q4_K_M file (fixture.ts). It asks the
 * planner first on a header-only (sparse) file of the same layout, so a machine that cannot hold the
 * model is told so before ~21.7 GB are written.
 *
 *   pnpm gate:35b                  # generates the file first when it is not cached
 *   pnpm gate:35b -- --threads 2
 */
import { runGate } from "../../gate27b/src/gate-run.js";
import { GATE_35B } from "./fixture.js";

await runGate(GATE_35B);
