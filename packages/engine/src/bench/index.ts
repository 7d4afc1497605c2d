/** `@keepquant/engine/bench`: the benchmark behind `keepquant bench` (on the public Engine API). */
export * from "./benchmark.js";
export { measureGuidedSteps, type GuidedStepTimes } from "../constrain/measure.js";
