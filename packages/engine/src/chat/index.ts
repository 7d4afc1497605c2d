export * from "./templates.js";
export * from "./render.js";
export * from "./window.js";
export * from "./encode.js";
export * from "./tool-format.js";
export * from "./tool-arguments.js";
export * from "./output-parser.js";
