export * from "./templates.js";
export * from "./render.js";
export * from "./encode.js";
