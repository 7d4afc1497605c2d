import { cpSync, readFileSync } from "node:fs";
import { defineConfig } from "tsup";

const { version } = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8")) as { version: string };

// Workspace packages (and the engine's pure-JS jinja) are bundled; the native addon stays external,
// and so do the CLI's npm dependencies (prom-client, for serve's metrics). The server's web page
// files are copied to dist/webui, where the bundled server looks for them.
export default defineConfig({
  entry: { index: "src/index.ts", keepquant: "src/bin.ts" },
  format: ["esm"],
  dts: { entry: { index: "src/index.ts" } },
  clean: true,
  sourcemap: true,
  target: "node20",
  noExternal: [/^@keepquant\/(?!tt-native)/, /^@huggingface\/jinja/],
  external: ["@keepquant/tt-native"],
  define: { __KEEPQUANT_VERSION__: JSON.stringify(version) },
  banner: { js: "#!/usr/bin/env node" },
  onSuccess: async () => {
    cpSync(new URL("../server/webui", import.meta.url), new URL("./dist/webui", import.meta.url), { recursive: true });
  },
});
