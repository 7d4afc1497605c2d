export * from "./errors.js";
export * from "./goldens.js";
export * from "./gate.js";
export * from "./fixtures.js";
export * from "./manifest.js";
export * from "./engine-runner.js";
export * from "./teacher-forced.js";
export * from "./default-model-manifest.js";
