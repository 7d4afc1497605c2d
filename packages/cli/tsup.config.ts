import { readFileSync } from "node:fs";
import { defineConfig } from "tsup";

const { version } = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8")) as { version: string };

// Workspace packages (and the engine's pure-JS jinja) are bundled; the native addon and the default model
// (a package file found relative to its own package) stay external.
export default defineConfig({
  entry: { index: "src/index.ts", keepquant: "src/bin.ts" },
  format: ["esm"],
  dts: { entry: { index: "src/index.ts" } },
  clean: true,
  sourcemap: true,
  target: "node20",
  noExternal: [/^@keepquant\/(?!tt-native|default-model)/, /^@huggingface\/jinja/],
  external: ["@keepquant/tt-native", "@keepquant/default-model"],
  define: { __KEEPQUANT_VERSION__: JSON.stringify(version) },
  banner: { js: "#!/usr/bin/env node" },
});
