export * from "./templates.js";
export * from "./render.js";
