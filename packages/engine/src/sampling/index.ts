export * from "./rng.js";
export * from "./candidates.js";
export * from "./params.js";
export * from "./sampler.js";
export * from "./stop-strings.js";
export * from "./logprobs.js";
export * from "./speculative.js";
