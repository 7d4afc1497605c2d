/**
 * `@keepquant/engine/parity`: what `keepquant parity` needs at run time (the gate, the goldens and
 * manifest formats, the Engine runner and the teacher-forced diagnostics). Nothing here needs a
 * dev-only package; goldens generation with the oracle and the fixture recipes live under tools/.
 */
export * from "./errors.js";
export * from "./goldens.js";
export * from "./gate.js";
export * from "./manifest.js";
export * from "./engine-runner.js";
export * from "./teacher-forced.js";
export * from "./default-model-manifest.js";
